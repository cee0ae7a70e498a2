//! Evaluation: one rule against one request ([`Check`]), and the decision walks
//! ([`Policy::decide`], [`Policy::decide_connect`], [`Policy::body_limit`]) over the
//! operator's baseline, then the project's rules, then the default. The rule keys beyond
//! the request line are exposed here as accessors on [`Rule`].

use std::cell::OnceCell;

use crate::body::{BodyCheck, DEFAULT_BODY_MATCH_BYTES};
use crate::content::{parse_query, Quantifier};
use crate::decision::{reason_code, AuditMatch};
use crate::matcher::{CanonicalPath, Host, ReadCheck};
use crate::obligation::{Limits, Mode, Redaction, Review};
use crate::{
    display_host, Action, ConnectDecision, Decision, Policy, PolicyError, RequestBody,
    RequestFacts, Rule,
};

/// One rule against one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    /// Every condition holds.
    Match,
    /// `field` does not hold; `detail` says why, for the new matchers.
    Mismatch {
        field: &'static str,
        detail: Option<String>,
    },
    /// Every condition before the body holds and the body was not read.
    NeedsBody,
    /// The rule cannot be evaluated: deny with this code (fail closed).
    Fail { code: &'static str, problem: String },
}

/// What every rule of one evaluation shares: the parsed host, path and query.
pub(crate) struct Context<'r, 'a> {
    pub(crate) request: &'r RequestFacts<'a>,
    pub(crate) host: &'r Host,
    pub(crate) path: &'r CanonicalPath,
    query: OnceCell<Option<Vec<(String, String)>>>,
}

impl<'r, 'a> Context<'r, 'a> {
    pub(crate) fn new(
        request: &'r RequestFacts<'a>,
        host: &'r Host,
        path: &'r CanonicalPath,
    ) -> Self {
        Context {
            request,
            host,
            path,
            query: OnceCell::new(),
        }
    }
}

fn mismatch(field: &'static str) -> Check {
    Check::Mismatch {
        field,
        detail: None,
    }
}

impl Rule {
    /// Checks this rule against a request, in the order scheme, host, port, profiles,
    /// method, path, query, headers, body (the body last: it is the costly one).
    pub(crate) fn check(&self, cx: &Context<'_, '_>) -> Check {
        let request = cx.request;
        if self.scheme.is_some_and(|scheme| scheme != request.scheme) {
            return mismatch("scheme");
        }
        if !self.host.matches(cx.host) {
            return mismatch("host");
        }
        if !self.port.matches(request.scheme, request.port) {
            return mismatch("port");
        }
        if !self.applies_to_profile(request.profile) {
            return Check::Mismatch {
                field: "profiles",
                detail: Some(match request.profile {
                    Some(profile) => format!("the run's profile is \"{profile}\""),
                    None => "the run has no profile".to_owned(),
                }),
            };
        }
        let method = self.method.as_ref().map_or(ReadCheck::Read, |m| {
            m.check(request, cx.path, self.body_match_limit())
        });
        if method == ReadCheck::NotRead {
            return mismatch("method");
        }
        if self.path.as_ref().is_some_and(|p| !p.matches(cx.path)) {
            return mismatch("path");
        }
        let quantifier = if self.action == Action::Deny {
            Quantifier::Any
        } else {
            Quantifier::All
        };
        if let Some(matcher) = &self.query {
            let Some(query) = cx.query.get_or_init(|| parse_query(request.query)) else {
                return Check::Fail {
                    code: reason_code::QUERY_UNPARSEABLE,
                    problem: "the query string has malformed percent-encoding or is not UTF-8"
                        .into(),
                };
            };
            if let Err(detail) = matcher.check(query, quantifier) {
                return Check::Mismatch {
                    field: "query",
                    detail: Some(detail),
                };
            }
        }
        if let Some(matcher) = &self.headers {
            if let Err(detail) = matcher.check(request.headers, quantifier) {
                return Check::Mismatch {
                    field: "headers",
                    detail: Some(detail),
                };
            }
        }
        // `read`/`write` of a POST that may be a GraphQL query: the body decides, and
        // it was not read (see `matcher/read.rs`).
        if method == ReadCheck::NeedsBody {
            return Check::NeedsBody;
        }
        let Some(matcher) = &self.body else {
            return Check::Match;
        };
        if !request.has_body {
            return Check::Mismatch {
                field: matcher.field(),
                detail: Some("the request has no body".into()),
            };
        }
        let limit = self.body_match_limit();
        match request.body {
            RequestBody::NotRead => Check::NeedsBody,
            RequestBody::TooLarge => Check::Fail {
                code: reason_code::BODY_TOO_LARGE,
                problem: format!("the body is over its limit of {limit} bytes (limit.body_bytes)"),
            },
            RequestBody::Read(bytes) if bytes.len() as u64 > limit => Check::Fail {
                code: reason_code::BODY_TOO_LARGE,
                problem: format!(
                    "the body is {} bytes, over its limit of {limit} bytes (limit.body_bytes)",
                    bytes.len()
                ),
            },
            RequestBody::Read(bytes) => match matcher.check(bytes) {
                BodyCheck::Match => Check::Match,
                BodyCheck::Mismatch(field, detail) => Check::Mismatch {
                    field,
                    detail: Some(detail),
                },
                BodyCheck::Unparseable(problem) => Check::Fail {
                    code: reason_code::BODY_UNPARSEABLE,
                    problem,
                },
            },
        }
    }

    /// Whether the rule applies to a run of `profile` (always, without `profiles`).
    pub(crate) fn applies_to_profile(&self, profile: Option<&str>) -> bool {
        match (&self.profiles, profile) {
            (None, _) => true,
            (Some(list), Some(profile)) => list.iter().any(|p| p == profile),
            (Some(_), None) => false,
        }
    }

    /// How many body bytes this rule's body matcher reads: `limit.body_bytes`, or
    /// [`DEFAULT_BODY_MATCH_BYTES`].
    pub fn body_match_limit(&self) -> u64 {
        self.limits.body_bytes.unwrap_or(DEFAULT_BODY_MATCH_BYTES)
    }

    /// True when the rule has a `json`, `graphql` or `jsonrpc` matcher.
    pub fn has_body_matcher(&self) -> bool {
        self.body.is_some()
    }

    /// `mode`: an audit rule logs what it would have done and does not decide.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// `strip`: lower-case header names removed before forwarding or staging.
    pub fn strip(&self) -> &[String] {
        &self.strip
    }

    /// `limit`: the rule's limits (all `None` without `limit`).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// `redact`: what is masked wherever the request is shown (never in released bytes).
    pub fn redact(&self) -> &[Redaction] {
        &self.redact
    }

    /// `review` of a stage rule (`Required` for every other rule).
    pub fn review(&self) -> Review {
        self.review
    }

    /// `profiles`: the run profiles the rule applies to (`None`: every run).
    pub fn profiles(&self) -> Option<&[String]> {
        self.profiles.as_deref()
    }
}

/// Where a walk over the rules stopped.
enum Walk {
    /// A rule decided (or failed, deciding deny).
    Decided(Decision),
    /// No rule decided.
    Default,
}

impl Policy {
    /// Decides one HTTP request (plain http absolute-form or an inner request of an
    /// intercepted CONNECT).
    ///
    /// A non-canonical path is denied before any rule is consulted; then the operator's
    /// baseline denies; then rules top-down, the first match wins (rules in audit mode
    /// are recorded in [`Decision::audit`] and passed over; tunnel rules decide only
    /// CONNECTs); then the default. A rule that cannot be evaluated (query or body it
    /// cannot parse, body over its limit) denies naming it. In a policy with
    /// `mode = "audit"` a denial other than the baseline's or a non-canonical path
    /// becomes a pass with reason code `audit_pass`.
    pub fn decide(&self, request: &RequestFacts<'_>) -> Decision {
        let path = match CanonicalPath::parse(request.path) {
            Ok(path) => path,
            Err(problem) => return Decision::non_canonical_path(problem.describe()),
        };
        let host = Host::parse(request.host);
        let mut audit = Vec::new();
        let walked = match &host {
            Some(host) => self.walk(&Context::new(request, host, &path), &mut audit),
            None => Walk::Default,
        };
        let mut decision = match walked {
            Walk::Decided(decision) => decision,
            Walk::Default => {
                let what = format!(
                    "{} {}://{}:{}{}",
                    request.method.to_ascii_uppercase(),
                    request.scheme,
                    display_host(host.as_ref()),
                    request.port,
                    request.path,
                );
                Decision::from_default(self.default, &what)
            }
        };
        if self.mode == Mode::Audit
            && decision.action == Action::Deny
            && decision.reason_code != reason_code::BASELINE_DENY
        {
            audit.push(AuditMatch {
                rule: decision.rule.clone(),
                action: Action::Deny,
                reason_code: decision.reason_code,
            });
            decision = Decision {
                action: Action::Pass,
                rule: decision.rule,
                reason: format!(
                    "audit mode: passed, but would have been denied ({}: {})",
                    decision.reason_code, decision.reason
                ),
                reason_code: reason_code::AUDIT_PASS,
                audit: Vec::new(),
            };
        }
        decision.audit = audit;
        decision
    }

    fn walk(&self, cx: &Context<'_, '_>, audit: &mut Vec<AuditMatch>) -> Walk {
        for rule in &self.baseline {
            match rule.check(cx) {
                Check::Match => {
                    return Walk::Decided(Decision::baseline(&rule.id, rule.reason.as_deref()))
                }
                Check::Mismatch { .. } => {}
                Check::NeedsBody => {
                    return Walk::Decided(Decision::failed(
                        &rule.id,
                        reason_code::BODY_UNPARSEABLE,
                        "the body was not read",
                    ))
                }
                Check::Fail { code, problem } => {
                    return Walk::Decided(Decision::failed(&rule.id, code, &problem))
                }
            }
        }
        for rule in self.rules.iter().filter(|r| r.action != Action::Tunnel) {
            let decision = match rule.check(cx) {
                Check::Mismatch { .. } => continue,
                Check::Match => Decision::from_rule(rule.action, &rule.id, rule.reason.as_deref()),
                Check::NeedsBody => Decision::failed(
                    &rule.id,
                    reason_code::BODY_UNPARSEABLE,
                    "the body was not read",
                ),
                Check::Fail { code, problem } => Decision::failed(&rule.id, code, &problem),
            };
            if rule.mode == Mode::Audit {
                audit.push(AuditMatch {
                    rule: Some(rule.id.clone()),
                    action: decision.action,
                    reason_code: decision.reason_code,
                });
                continue;
            }
            return Walk::Decided(decision);
        }
        Walk::Default
    }

    /// How many body bytes the proxy must buffer to decide `request`: `Some(limit)` when
    /// a rule with a body matcher could decide it (its other conditions hold and no
    /// earlier rule decides regardless of the body), `None` when the body does not
    /// matter. Read up to `limit` bytes and pass [`RequestBody::Read`], or
    /// [`RequestBody::TooLarge`] when the body is longer.
    pub fn body_limit(&self, request: &RequestFacts<'_>) -> Option<u64> {
        if !request.has_body {
            return None;
        }
        let path = CanonicalPath::parse(request.path).ok()?;
        let host = Host::parse(request.host)?;
        let unread = RequestFacts {
            body: RequestBody::NotRead,
            ..*request
        };
        let cx = Context::new(&unread, &host, &path);
        let mut limit: Option<u64> = None;
        let rules = self
            .baseline
            .iter()
            .chain(self.rules.iter().filter(|r| r.action != Action::Tunnel));
        for rule in rules {
            match rule.check(&cx) {
                Check::Mismatch { .. } => {}
                Check::NeedsBody => {
                    limit = Some(limit.unwrap_or(0).max(rule.body_match_limit()));
                }
                Check::Match if rule.mode == Mode::Audit => {}
                Check::Match | Check::Fail { .. } => break,
            }
        }
        limit
    }

    /// Decides a CONNECT host:port before the tunnel is answered, for a run without a
    /// profile; see [`Policy::decide_connect_for`].
    pub fn decide_connect(&self, host: &str, port: u16) -> ConnectDecision {
        self.decide_connect_for(host, port, None)
    }

    /// Decides a CONNECT host:port by a run of `profile` before the tunnel is answered.
    ///
    /// Baseline rules first: a host-level baseline deny denies now; a conditional one
    /// forces interception (a project tunnel rule would hide the requests it must see).
    /// Then rules top-down considering host, port and profiles only (audit rules are
    /// passed over): a tunnel rule tunnels; a pass or stage rule means some inner request
    /// may be allowed (intercept); a deny rule with no other condition denies every inner
    /// request (deny now, `rule_deny`); a conditional deny rule is skipped. When no rule
    /// decides, a `deny` default denies (`default_deny`) and any other default
    /// intercepts. In audit mode a CONNECT the project would deny is intercepted, so
    /// each inner request is decided (and recorded) on its own.
    pub fn decide_connect_for(
        &self,
        host: &str,
        port: u16,
        profile: Option<&str>,
    ) -> ConnectDecision {
        let parsed = Host::parse(host);
        let mut baseline_conditional = false;
        if let Some(parsed) = &parsed {
            for rule in self
                .baseline
                .iter()
                .filter(|rule| rule.matches_connect(parsed, port, profile))
            {
                if rule.is_host_level() {
                    return ConnectDecision::Deny(Decision::baseline(
                        &rule.id,
                        rule.reason.as_deref(),
                    ));
                }
                baseline_conditional = true;
            }
            for rule in self.rules.iter().filter(|rule| {
                rule.mode == Mode::Enforce && rule.matches_connect(parsed, port, profile)
            }) {
                match rule.action {
                    Action::Tunnel if baseline_conditional => return ConnectDecision::Intercept,
                    Action::Tunnel => {
                        return ConnectDecision::Tunnel(Decision::from_rule(
                            Action::Tunnel,
                            &rule.id,
                            rule.reason.as_deref(),
                        ))
                    }
                    Action::Pass | Action::Stage => return ConnectDecision::Intercept,
                    Action::Deny if rule.is_host_level() => {
                        if self.mode == Mode::Audit {
                            return ConnectDecision::Intercept;
                        }
                        return ConnectDecision::Deny(Decision::from_rule(
                            Action::Deny,
                            &rule.id,
                            rule.reason.as_deref(),
                        ));
                    }
                    Action::Deny => {}
                }
            }
        }
        match self.default {
            Action::Deny | Action::Tunnel if self.mode == Mode::Enforce => {
                ConnectDecision::Deny(Decision::from_default(
                    Action::Deny,
                    &format!("CONNECT {}:{port}", display_host(parsed.as_ref())),
                ))
            }
            _ => ConnectDecision::Intercept,
        }
    }

    /// `mode` of the whole policy.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The operator's baseline rules (all deny), evaluated before the project's rules.
    pub fn baseline(&self) -> &[Rule] {
        &self.baseline
    }

    /// Adds an operator baseline (`airlock serve --baseline FILE`): its rules are
    /// evaluated before this policy's and cannot be overridden by them. Every baseline
    /// rule must be an enforcing deny rule; its ids must not be used by this policy.
    /// `origin` names the baseline file in errors.
    pub fn with_baseline(mut self, baseline: Policy, origin: &str) -> Result<Policy, PolicyError> {
        for (position, rule) in baseline.rules.iter().enumerate() {
            let problem = if rule.action != Action::Deny {
                Some(("action", "a baseline holds only deny rules".to_owned()))
            } else if rule.mode != Mode::Enforce {
                Some(("mode", "a baseline rule cannot be in audit mode".to_owned()))
            } else if self.rules.iter().any(|r| r.id == rule.id) {
                Some((
                    "id",
                    "the project policy uses the same id; baseline ids must be distinct".to_owned(),
                ))
            } else {
                None
            };
            if let Some((field, problem)) = problem {
                return Err(PolicyError::Rule {
                    origin: origin.to_owned(),
                    index: position + 1,
                    id: Some(rule.id.clone()),
                    field,
                    problem,
                });
            }
        }
        self.baseline = baseline.rules;
        Ok(self)
    }
}
