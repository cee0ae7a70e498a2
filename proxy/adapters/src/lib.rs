//! Adapters: the semantics of the APIs agents use most, so that a staged effect answers
//! like the real thing (docs/design.md glossary: adapter). A stage rule selects one with
//! `respond = "NAME"`; without it the [`webhook`] adapter answers (the rule's
//! `[rule.respond]` template, or airlock's `202 Accepted` JSON). Reference:
//! docs/adapters.md.
//!
//! An adapter recognises the endpoint of a staged request, says which values of its
//! answer only the origin can assign (placeholders), renders the synthetic response and a
//! one-line summary for reviewers, may answer reads of resources that exist only as staged
//! effects (read-your-staged-writes), may judge the origin's answer at release (a `200`
//! that says the update was refused is a failure) and may describe an approximate inverse
//! request (a compensation).

use airlock_ledger::{Effect, PlaceholderSpec, RunId, ValueKind};
use airlock_policy::Respond;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Response, StatusCode};

use airlock_net::body::{full_body, ProxyBody};

pub mod git;
pub mod github;
pub mod graphql;
pub mod mcp;
pub mod slack;
pub mod webhook;

/// A request as an adapter sees it: at staging (from the client), or rebuilt from a staged
/// effect (for read-your-staged-writes, release checks and compensations).
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// Request method, upper case.
    pub method: &'a str,
    /// Absolute URL, `scheme://authority/path?query`.
    pub url: &'a str,
    /// End-to-end headers, lower-case names, values as text (lossy).
    pub headers: Vec<(String, String)>,
    /// The whole request body.
    pub body: &'a [u8],
    /// The stage rule's `[rule.respond]` template, when it has one (webhook only).
    pub template: Option<&'a Respond>,
    /// What the run's earlier traffic with this origin told the adapter
    /// ([`airlock_ledger::Effect::context`]; MCP: [`mcp::Context`]), when anything.
    pub context: Option<&'a serde_json::Value>,
}

impl<'a> Call<'a> {
    /// The call a staged effect stands for.
    pub fn of_effect(effect: &'a Effect, body: &'a [u8]) -> Self {
        Self {
            method: &effect.method,
            url: &effect.url,
            headers: effect
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.clone(),
                        String::from_utf8_lossy(h.value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body,
            template: None,
            context: effect.context.as_ref(),
        }
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `scheme://authority` of the URL.
    pub fn origin(&self) -> &str {
        let after_scheme = self.url.find("://").map_or(0, |i| i + 3);
        let end = self.url[after_scheme..]
            .find('/')
            .map_or(self.url.len(), |i| after_scheme + i);
        &self.url[..end]
    }

    /// The authority (`host[:port]`) of the URL.
    pub fn authority(&self) -> &str {
        let origin = self.origin();
        origin.find("://").map_or(origin, |i| &origin[i + 3..])
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        let rest = &self.url[self.origin().len()..];
        let end = rest.find('?').unwrap_or(rest.len());
        if rest.is_empty() {
            "/"
        } else {
            &rest[..end]
        }
    }

    /// The query, without `?`.
    pub fn query(&self) -> Option<&str> {
        let rest = &self.url[self.origin().len()..];
        rest.find('?').map(|i| &rest[i + 1..])
    }

    /// The body as JSON, when it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(self.body).ok()
    }

    /// `METHOD authority/path`: the summary of a request no adapter recognises.
    pub fn fallback_summary(&self) -> String {
        format!("{} {}{}", self.method, self.authority(), self.path())
    }
}

/// What an adapter decides about a staged request before it is written.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The endpoint recognised (`pulls.create`, `receive-pack`, …); `None` when the
    /// adapter does not know it: the webhook adapter then answers.
    pub endpoint: Option<&'static str>,
    /// One line for reviewers.
    pub summary: String,
    /// Values of the answer only the origin can assign: JSON pointers into the origin's
    /// real response, allocated by the ledger.
    pub placeholders: Vec<PlaceholderSpec>,
}

impl Plan {
    /// A recognised endpoint with its summary and placeholders `(pointer, kind)`.
    pub fn new(
        endpoint: &'static str,
        summary: String,
        placeholders: &[(&str, ValueKind)],
    ) -> Self {
        Self {
            endpoint: Some(endpoint),
            summary,
            placeholders: placeholders
                .iter()
                .map(|(pointer, kind)| PlaceholderSpec {
                    pointer: (*pointer).to_owned(),
                    kind: *kind,
                })
                .collect(),
        }
    }
}

/// A response airlock gives in the origin's name.
#[derive(Debug, Clone)]
pub struct Synthetic {
    /// Status code.
    pub status: u16,
    /// Headers (Content-Length is set by airlock).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Synthetic {
    /// A JSON answer (`application/json; charset=utf-8`, as GitHub and Slack send).
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![(
                "content-type".into(),
                "application/json; charset=utf-8".into(),
            )],
            body: serde_json::to_vec_pretty(body).unwrap_or_default(),
        }
    }

    /// The response sent to the client, naming `effect` in `airlock-effect` when given.
    pub fn into_response(self, effect: Option<&str>) -> Response<ProxyBody> {
        let length = self.body.len();
        let mut response = Response::new(full_body(Bytes::from(self.body)));
        *response.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(name, value);
            }
        }
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        if let Some(value) = effect.and_then(|e| HeaderValue::from_str(e).ok()) {
            headers.insert(airlock_net::respond::EFFECT_HEADER, value);
        }
        response
    }
}

/// A staged effect with its body, for answering reads from staged state.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The effect.
    pub effect: Effect,
    /// Its request body.
    pub body: Vec<u8>,
}

impl Staged {
    /// The request the effect stands for.
    pub fn call(&self) -> Call<'_> {
        Call::of_effect(&self.effect, &self.body)
    }
}

/// An approximate inverse of a released effect: a new request, itself staged for review.
#[derive(Debug, Clone)]
pub struct Compensation {
    /// Method.
    pub method: String,
    /// Absolute URL (real values, no placeholders).
    pub url: String,
    /// Content-Type of the body, when there is one.
    pub content_type: Option<String>,
    /// Body.
    pub body: Vec<u8>,
    /// One line for reviewers.
    pub summary: String,
}

/// One request of a release session, sent to the effect's URL with the effect's headers
/// (credentials included) less [`ReleaseSession::replaces`], plus `headers`.
#[derive(Debug, Clone)]
pub struct SessionRequest {
    /// Method (`POST`, `DELETE`).
    pub method: &'static str,
    /// Headers of its own (`content-type`, `accept`), replacing the effect's of that name.
    pub headers: Vec<(String, String)>,
    /// Body (empty for none).
    pub body: Vec<u8>,
}

/// A session an adapter opens with the origin for one release, without I/O of its own:
/// the release plane sends [`open`](Self::open), reads the answer with
/// [`opened`](Self::opened) (which yields the headers every later request carries), sends
/// [`before_call`](Self::before_call), then the effect's own request with those headers,
/// records its answer as the release's, and finally sends [`close`](Self::close) without
/// waiting on it. A failure before the call is sent leaves the call provably unsent.
pub trait ReleaseSession: Send + Sync {
    /// Header names (lower case) of the staged request that the session replaces (its
    /// old session id).
    fn replaces(&self) -> &'static [&'static str];
    /// The request that opens the session.
    fn open(&self) -> SessionRequest;
    /// Judges the answer to [`open`](Self::open) (`headers` with lower-case names): the
    /// headers every later request carries, or why the session did not open.
    fn opened(
        &self,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String>;
    /// Requests sent after opening and before the call, in order.
    fn before_call(&self) -> Vec<SessionRequest>;
    /// The request that ends the session, given what [`opened`](Self::opened) returned;
    /// `None` when there is nothing to end.
    fn close(&self, carried: &[(String, String)]) -> Option<SessionRequest>;
}

/// The semantics of one API. Implementations are stateless; the ledger holds the state.
pub trait Adapter: Send + Sync {
    /// The name a rule uses in `respond = "NAME"`.
    fn name(&self) -> &'static str;

    /// Recognises the endpoint and plans the effect: summary and placeholders.
    fn plan(&self, call: &Call<'_>) -> Plan;

    /// A structured account of a staged request for reviewers, beyond the summary line
    /// (git: the pushed commits, authors, paths and diffstat read from the pack; docs/adapters.md).
    /// `None` (the default) when the adapter has nothing more to say.
    fn details(&self, _call: &Call<'_>) -> Option<serde_json::Value> {
        None
    }

    /// The answer to a request that provably changes nothing at the origin and that the
    /// client sends only to probe it (git's receive-pack probe: a body that is a lone
    /// flush packet), given without staging an effect. `None` (the default) stages it.
    fn answer_without_effect(&self, _call: &Call<'_>) -> Option<Synthetic> {
        None
    }

    /// The synthetic response of a staged effect; `effect.placeholders` holds the values
    /// allocated for the plan's pointers. Deterministic: read-your-staged-writes renders
    /// the same object again.
    fn respond(&self, call: &Call<'_>, effect: &Effect) -> Synthetic;

    /// Answers a read (`GET`) that names placeholders of staged effects from the run's
    /// staged state (`staged`, in staging order), or `None` to let airlock stage it.
    fn read_staged(&self, _call: &Call<'_>, _staged: &[Staged]) -> Option<Synthetic> {
        None
    }

    /// Whether `method url` is a list read (`GET /repos/o/r/pulls`) this adapter merges
    /// the run's staged objects into ([`Adapter::merge_list`]). Cheap: it decides whether
    /// the data plane loads the run's staged effects at all. `false` by default.
    fn lists_staged(&self, _method: &str, _url: &str) -> bool {
        false
    }

    /// The origin's answer `page` to the list read `call` (its `Link` header `link`) with
    /// the staged objects of `staged` (the run's effects of this adapter not yet released,
    /// in staging order) merged in where the API would list them; with how many were
    /// added. `None` when nothing is merged (the default).
    fn merge_list(
        &self,
        _call: &Call<'_>,
        _link: Option<&str>,
        _page: &[u8],
        _staged: &[Staged],
    ) -> Option<(Vec<u8>, usize)> {
        None
    }

    /// Judges the origin's answer to a release: `Some(reason)` makes the effect `failed`
    /// even though the status is below 400 (git's `ng`, Slack's `ok: false`).
    fn release_failure(&self, _call: &Call<'_>, _status: u16, _body: &[u8]) -> Option<String> {
        None
    }

    /// The request header in which the API honours an idempotency key for `call`
    /// (Stripe's `Idempotency-Key`), when it honours one: every release attempt then
    /// carries the effect's stable key there. `None` (the default, and the answer of
    /// every bundled adapter: GitHub, Slack, GraphQL, git and plain webhooks honour none);
    /// a rule's `idempotency_key` says it for any origin (docs/policy.md#idempotency-keys).
    fn idempotency_header(&self, _call: &Call<'_>) -> Option<&'static str> {
        None
    }

    /// The session of its own airlock opens with the origin to release `call` (the staged
    /// request, placeholders not yet substituted), when the API needs one: the release
    /// plane sends [`ReleaseSession::open`] and what follows around the call. `None` (the
    /// default; every adapter but `mcp`) sends the call alone, as staged.
    fn release_session(&self, _call: &Call<'_>) -> Option<Box<dyn ReleaseSession>> {
        None
    }

    /// Approximate inverses of a released effect (`call` with placeholders substituted,
    /// `response` the origin's captured answer), in the order they should be sent.
    fn compensations(&self, _call: &Call<'_>, _response: &[u8]) -> Vec<Compensation> {
        Vec::new()
    }
}

/// The adapter that merges staged objects into the list read `method url`, if any
/// ([`Adapter::lists_staged`]).
pub fn list_merger(method: &str, url: &str) -> Option<&'static dyn Adapter> {
    airlock_policy::ADAPTERS
        .iter()
        .filter_map(|name| by_name(name))
        .find(|adapter| adapter.lists_staged(method, url))
}

/// The adapter called `name` (one of [`airlock_policy::ADAPTERS`]).
pub fn by_name(name: &str) -> Option<&'static dyn Adapter> {
    match name {
        "webhook" => Some(&webhook::Webhook),
        "github" => Some(&github::GitHub),
        "graphql" => Some(&graphql::GraphQl),
        "slack" => Some(&slack::Slack),
        "git" => Some(&git::Git),
        "mcp" => Some(&mcp::Mcp),
        _ => None,
    }
}

/// The adapter that answers for a stage rule: the one it names; else `mcp` for a rule
/// with a `jsonrpc` matcher (a JSON-RPC client waits for a response with its call's `id`);
/// else `webhook`.
pub fn for_rule(policy: &airlock_policy::Policy, rule: Option<&str>) -> &'static dyn Adapter {
    let rule = rule.and_then(|id| policy.rule(id));
    match rule.and_then(|rule| rule.adapter()).and_then(by_name) {
        Some(named) => named,
        None if rule.is_some_and(|r| r.has_jsonrpc() && r.respond().is_none()) => &mcp::Mcp,
        None => &webhook::Webhook,
    }
}

/// The adapter recorded on an effect (`webhook` when none was).
pub fn of_effect(effect: &Effect) -> &'static dyn Adapter {
    effect
        .adapter
        .as_deref()
        .and_then(by_name)
        .unwrap_or(&webhook::Webhook)
}

/// The effect's one-line summary for reviewers: its adapter's, else `METHOD host/path`.
pub fn summary_of(effect: &Effect) -> String {
    effect.summary.clone().unwrap_or_else(|| {
        let without_scheme = effect
            .url
            .split_once("://")
            .map_or(effect.url.as_str(), |(_, rest)| rest);
        let path = without_scheme.split('?').next().unwrap_or(without_scheme);
        format!("{} {path}", effect.method)
    })
}

/// The value allocated for placeholder `pointer` of `effect` (empty when none).
pub fn placeholder<'e>(effect: &'e Effect, pointer: &str) -> &'e str {
    effect
        .placeholders
        .iter()
        .find(|p| p.pointer == pointer)
        .map_or("", |p| p.value.as_str())
}

/// `placeholder` as a JSON value of its kind (a number placeholder is a JSON number).
pub fn placeholder_json(effect: &Effect, pointer: &str) -> serde_json::Value {
    let found = effect.placeholders.iter().find(|p| p.pointer == pointer);
    match found {
        Some(p) if p.kind == ValueKind::Number => p
            .value
            .parse::<u64>()
            .map(serde_json::Value::from)
            .unwrap_or_else(|_| serde_json::Value::from(p.value.clone())),
        Some(p) => serde_json::Value::from(p.value.clone()),
        None => serde_json::Value::Null,
    }
}

/// `ms` since the Unix epoch as RFC 3339 UTC without fractions (`2026-11-29T13:27:51Z`),
/// the timestamp form GitHub uses.
pub fn rfc3339(ms: u64) -> String {
    let seconds = i64::try_from(ms / 1000).unwrap_or(0);
    match time::OffsetDateTime::from_unix_timestamp(seconds) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => "1970-01-01T00:00:00Z".to_owned(),
    }
}

/// Shortens `text` to `max` characters for a summary, with `…` when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > max || text.lines().nth(1).is_some() {
        let mut out: String = line.chars().take(max).collect();
        out.push('…');
        out
    } else {
        line.to_owned()
    }
}

/// Read-your-staged-writes: a read of `run` that carries placeholders of the staged
/// effects `parents` is answered by the first of their adapters that knows the resource,
/// from `staged`, the run's staged effects of the parents' adapters with their bodies
/// (the data plane loads them). `None` when no adapter answers (airlock then stages the
/// read, so that no placeholder reaches an origin).
pub fn answer_read(
    staged: &[Staged],
    run: &RunId,
    method: &str,
    url: &str,
    headers: &http::HeaderMap,
    parents: &[airlock_ledger::EffectId],
) -> Option<Response<ProxyBody>> {
    if method != "GET" && method != "HEAD" {
        return None;
    }
    let call = Call {
        method,
        url,
        headers: airlock_net::headers::to_records(headers)
            .iter()
            .map(|h| {
                (
                    h.name.clone(),
                    String::from_utf8_lossy(h.value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: &[],
        template: None,
        context: None,
    };
    let mut tried: Vec<&'static str> = Vec::new();
    for parent in parents {
        let Some(staged_parent) = staged.iter().find(|s| &s.effect.id == parent) else {
            continue;
        };
        let adapter = of_effect(&staged_parent.effect);
        if tried.contains(&adapter.name()) {
            continue;
        }
        tried.push(adapter.name());
        if let Some(mut answer) = adapter.read_staged(&call, staged) {
            answer
                .headers
                .push(("airlock-staged-read".into(), adapter.name().into()));
            // For HEAD, hyper sends the head (Content-Length of the GET) without the body.
            tracing::info!(run.id = %run, url = %url, adapter = adapter.name(), "read answered from staged state");
            return Some(answer.into_response(Some(parent.as_str())));
        }
    }
    None
}

#[cfg(test)]
mod tests;
