//! Credentials (docs/policy.md "Credentials"): secret values airlock adds to requests on its
//! way out, so the sandbox never holds them.
//!
//! The policy holds each credential's spec (source, bind, place, placeholder); at start
//! [`Credentials::resolve`] reads every value into this separate store, so the policy,
//! `explain`, the manifest, the ledger and the admin API never hold one. Then:
//!
//! - **pass**: a rule with `inject` has the value placed on the forwarded request
//!   ([`plan`] decides, [`apply`] places), replacing any client-sent value;
//! - **stage**: the ledger stores the request as the client sent it plus the credential's
//!   *name*; [`apply_release`] places the value when the effect is released;
//! - **placeholders**: with `placeholder = true` each run gets an opaque stand-in
//!   ([`Credentials::placeholder`], exported by [`Credentials::placeholder_env`]); on a
//!   request inside the bind it is swapped for the value in headers and the query; a
//!   request carrying it anywhere else is refused ([`refuse_off_host`]);
//! - **scrub**: whatever was sent is masked in the origin's answer ([`scrub`]).

pub mod decode;
pub mod scrub;

use airlock_net::authority::percent_encode;
use std::fmt;

use airlock_ledger::{RunFlag, RunId};
use airlock_policy::{Credential, Placement, Policy, RequestFacts};
use base64::Engine as _;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue};
use tracing::warn;

use crate::policy_store::Snapshot;
pub use crate::secrets::{
    placeholder_var, CredentialError, Credentials, Secret, PLACEHOLDER_ENV_PREFIX,
    PLACEHOLDER_PREFIX,
};
use crate::DataPlane;
use airlock_net::respond::ProxyError;
use scrub::Scrubber;

/// The reason code of a request refused because it carries a run's credential placeholder
/// to a host outside the credential's bind.
pub const OFF_HOST_CODE: &str = "credential_placeholder_off_host";

/// The reason code of a request an injecting rule matched but that is outside the
/// credential's bind (the loader refuses such rules; this is the check at the door).
pub const OUTSIDE_BIND_CODE: &str = "credential_outside_bind";

/// What to do to one request on its way out: the credential to place, and the run's
/// placeholders to swap for their values.
#[derive(Clone)]
pub struct Plan {
    inject: Option<(Placement, Secret)>,
    swaps: Vec<(String, Secret)>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("inject", &self.inject.as_ref().map(|(place, _)| place))
            .field("swaps", &self.swaps.len())
            .finish()
    }
}

/// The plan for a request of `run` that `facts` describe, decided by a rule that injects
/// `inject` (if any): `None` when nothing is to be placed or swapped.
///
/// Errors: the injected credential is unknown to the store, or the request is outside
/// its bind (the loader already refuses such rules; this is the check at the door).
pub fn plan(
    policy: &Snapshot,
    run: &RunId,
    facts: &RequestFacts<'_>,
    inject: Option<&str>,
) -> Result<Option<Plan>, ProxyError> {
    plan_with(&policy.policy, &policy.credentials, run, facts, inject)
}

fn plan_with(
    policy: &Policy,
    store: &Credentials,
    run: &RunId,
    facts: &RequestFacts<'_>,
    inject: Option<&str>,
) -> Result<Option<Plan>, ProxyError> {
    let inject = match inject {
        None => None,
        Some(name) => {
            let (Some(credential), Some(secret)) = (policy.credential(name), store.secret(name))
            else {
                return Err(ProxyError::Internal {
                    reason: format!("credential \"{name}\" was not loaded"),
                });
            };
            if !credential.binds(facts) {
                return Err(ProxyError::Denied {
                    rule: None,
                    reason: format!(
                        "credential \"{name}\" is not bound to {} {}{}",
                        facts.method, facts.host, facts.path
                    ),
                    reason_code: OUTSIDE_BIND_CODE.to_owned(),
                    policy_revision: policy.revision().to_owned(),
                    hint: None,
                });
            }
            Some((credential.place().clone(), secret.clone()))
        }
    };
    let swaps: Vec<(String, Secret)> = policy
        .credentials()
        .filter(|c| c.placeholder() && c.binds(facts))
        .filter_map(|c| {
            let secret = store.secret(c.name())?.clone();
            Some((store.placeholder(run, c.name()), secret))
        })
        .collect();
    if inject.is_none() && swaps.is_empty() {
        return Ok(None);
    }
    Ok(Some(Plan { inject, swaps }))
}

/// `url` with every `param=` pair removed from its query and `param=value` appended.
fn set_query(url: &str, param: &str, value: &str) -> String {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((head, fragment)) => (head, Some(fragment)),
        None => (url, None),
    };
    let (base, query) = before_fragment
        .split_once('?')
        .unwrap_or((before_fragment, ""));
    let mut pairs: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter(|pair| pair.split('=').next() != Some(param))
        .collect();
    let added = format!("{param}={value}");
    pairs.push(&added);
    let mut out = format!("{base}?{}", pairs.join("&"));
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// Records a secret as sent: raw, percent-encoded and JSON-escaped (the forms an origin
/// may echo it in).
fn note(secret: &str, sent: &mut Vec<Vec<u8>>) {
    sent.push(secret.as_bytes().to_vec());
    sent.push(percent_encode(secret, b"").into_bytes());
    if let Ok(json) = serde_json::to_string(secret) {
        sent.push(json.trim_matches('"').as_bytes().to_vec());
    }
}

/// Places the plan on a request given as URL and header list; returns what to scrub
/// from the answer.
fn place(
    plan: &Plan,
    url: &mut String,
    headers: &mut Vec<(String, Vec<u8>)>,
) -> Result<Scrubber, String> {
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for (placeholder, secret) in &plan.swaps {
        let mut used = false;
        if url.contains(placeholder.as_str()) {
            *url = url.replace(placeholder.as_str(), &percent_encode(secret.expose(), b""));
            used = true;
        }
        for (_, value) in headers.iter_mut() {
            if let Ok(text) = std::str::from_utf8(value) {
                if text.contains(placeholder.as_str()) {
                    *value = text
                        .replace(placeholder.as_str(), secret.expose())
                        .into_bytes();
                    used = true;
                }
            }
        }
        if used {
            note(secret.expose(), &mut sent);
        }
    }
    if let Some((placement, secret)) = &plan.inject {
        note(secret.expose(), &mut sent);
        match placement {
            Placement::Header { name, format } => {
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                headers.push((
                    name.clone(),
                    Placement::header_value(format, secret.expose()).into_bytes(),
                ));
            }
            Placement::Basic { username } => {
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{}", secret.expose()));
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
                headers.push((
                    "authorization".to_owned(),
                    format!("Basic {encoded}").into_bytes(),
                ));
                sent.push(encoded.into_bytes());
            }
            Placement::Query { param } => {
                *url = set_query(url, param, &percent_encode(secret.expose(), b""));
            }
        }
    }
    if !sent.is_empty() {
        // Ask for an unencoded answer, so an echo can be found and scrubbed.
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case("accept-encoding"));
        headers.push(("accept-encoding".to_owned(), b"identity".to_vec()));
    }
    Ok(Scrubber::new(sent))
}

/// Applies the [`Plan`] a request carries in its extensions (put there by the per-request
/// path) to the request about to be forwarded; returns what to scrub from the answer, or
/// `None` when the request carries no plan.
///
/// Errors: a placed value is not a valid header value or URI.
pub fn apply(parts: &mut Parts) -> Result<Option<Scrubber>, ProxyError> {
    let Some(plan) = parts.extensions.remove::<Plan>() else {
        return Ok(None);
    };
    let mut url = parts.uri.to_string();
    let mut headers: Vec<(String, Vec<u8>)> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    let scrubber =
        place(&plan, &mut url, &mut headers).map_err(|reason| ProxyError::Internal { reason })?;
    let invalid = |what: &str| ProxyError::Internal {
        reason: format!("a credential could not be placed: the {what} would be invalid"),
    };
    parts.uri = url.parse().map_err(|_| invalid("URI"))?;
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("header name"))?;
        let mut value = HeaderValue::from_bytes(&value).map_err(|_| invalid("header value"))?;
        if airlock_net::headers::is_credential(name.as_str()) {
            value.set_sensitive(true);
        }
        map.append(name, value);
    }
    parts.headers = map;
    Ok(Some(scrubber))
}

/// Places the credential a staged effect names (and swaps the run's placeholders) on the
/// release request `url`/`headers`; returns what to scrub from the origin's answer.
///
/// Errors (the effect is then not sent): the credential is no longer in the policy or
/// not loaded, or the request is outside its bind.
pub fn apply_release(
    shared: &DataPlane,
    effect: &airlock_ledger::Effect,
    url: &mut String,
    headers: &mut Vec<(String, Vec<u8>)>,
    has_body: bool,
) -> Result<Scrubber, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("{url} is not a valid URL"))?;
    let scheme = if uri.scheme_str() == Some("http") {
        airlock_policy::Scheme::Http
    } else {
        airlock_policy::Scheme::Https
    };
    let target = airlock_net::authority::Target::parse(
        scheme,
        uri.authority().map(|a| a.as_str()).unwrap_or(""),
        scheme.default_port(),
    )
    .ok_or_else(|| format!("{url} names no valid host"))?;
    let facts = RequestFacts::new(
        scheme,
        &target.host,
        target.port,
        &effect.method,
        uri.path(),
        has_body,
    );
    // A release is the control plane's: it plans the credential under the policy in
    // force when the effect is sent, not the one it was staged under.
    #[allow(clippy::disallowed_methods)]
    let policy = shared.policy.current();
    let plan = plan(&policy, &effect.run_id, &facts, effect.inject.as_deref()).map_err(
        |error| match error {
            ProxyError::Denied { reason, .. } | ProxyError::Internal { reason } => {
                format!("{reason}; the credential is not added and the effect is not sent")
            }
            other => other.to_string(),
        },
    )?;
    match plan {
        None => Ok(Scrubber::default()),
        Some(plan) => place(&plan, url, headers),
    }
}

/// Every text the request's URL, header names and values and (when given) `body` read as
/// ([`airlock_ledger::fingerprint::readings::request`]; the body with the request's
/// `Content-Encoding`): what both placeholder searches read.
pub(crate) fn request_readings(
    parts: &Parts,
    body: Option<&[u8]>,
) -> airlock_ledger::fingerprint::readings::RequestReadings {
    airlock_ledger::fingerprint::readings::request(
        &parts.uri.to_string(),
        parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes())),
        body.map(|b| (b, content_encoding(parts))),
    )
}

/// The request's `Content-Encoding`, when it is text.
pub(crate) fn content_encoding(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(http::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
}

/// The credential (with `placeholder = true`, not bound to `host`) whose run placeholder
/// `parts` (URL, header names and values) or `body` (when given) carry, if any: raw, in
/// any casing, or in any encoding the origin may decode — the readings of
/// [`airlock_ledger::fingerprint::readings::request`] (percent-encoding, base64 runs and
/// `Basic` credentials, JSON escapes, gzip and deflate), the same the search for staged
/// effects' placeholders reads.
pub fn find_off_host<'p>(
    policy: &'p Snapshot,
    run: &RunId,
    host: &str,
    parts: &Parts,
    body: Option<&[u8]>,
) -> Option<&'p Credential> {
    let mut candidates = policy
        .credentials()
        .filter(|c| c.placeholder() && !c.binds_host(host))
        .peekable();
    candidates.peek()?;
    let readings = request_readings(parts, body);
    let texts = readings.texts.iter().map(|(_, t)| t.as_str());
    find_off_host_in(
        policy,
        run,
        host,
        body.into_iter().chain(texts.map(str::as_bytes)),
    )
}

/// The credential (with `placeholder = true`, not bound to `host`) whose run placeholder
/// one of `texts` holds, in any casing (placeholders are lower-case: an upper-cased copy
/// is found too). The texts are what the caller read the request or message as.
pub fn find_off_host_in<'p, 't>(
    policy: &'p Snapshot,
    run: &RunId,
    host: &str,
    texts: impl Iterator<Item = &'t [u8]>,
) -> Option<&'p Credential> {
    let mut candidates = policy
        .credentials()
        .filter(|c| c.placeholder() && !c.binds_host(host))
        .peekable();
    candidates.peek()?;
    let texts: Vec<Vec<u8>> = texts.map(|t| t.to_ascii_lowercase()).collect();
    candidates.find(|credential| {
        let placeholder = policy.credentials.placeholder(run, credential.name());
        let needle = placeholder.to_ascii_lowercase();
        let needle = needle.as_bytes();
        texts
            .iter()
            .any(|hay| hay.windows(needle.len()).any(|w| w == needle))
    })
}

/// Whether any credential has a placeholder not bound to `host` (then bodies to `host`
/// are worth searching).
pub fn any_off_host(policy: &Snapshot, host: &str) -> bool {
    policy
        .credentials()
        .any(|c| c.placeholder() && !c.binds_host(host))
}

/// The alert for a placeholder headed off its bind: a warn log line (credential and host,
/// never a value), a metric, a flag on the run, and the 403 to answer with.
pub fn refuse_off_host(
    shared: &DataPlane,
    policy: &Snapshot,
    run: &RunId,
    host: &str,
    credential: &Credential,
) -> ProxyError {
    let name = credential.name();
    warn!(run.id = %run, credential = name, origin.host = host,
          "a credential placeholder was sent to a host outside its bind: refused and flagged");
    shared.metrics.credential_placeholder_off_host(name);
    let detail = format!(
        "the placeholder of credential \"{name}\" was sent to {host}, outside its bind {:?}",
        credential.bind_hosts()
    );
    let flag = RunFlag {
        code: OFF_HOST_CODE.to_owned(),
        detail: detail.clone(),
        at_ms: airlock_ledger::now_ms(),
    };
    if let Err(error) = shared.ledger.flag_run(run, flag) {
        warn!(run.id = %run, error = %error, "could not flag the run");
    }
    ProxyError::Denied {
        rule: None,
        reason: format!(
            "{detail}: a credential placeholder only ever goes to its bound hosts (an exfiltration attempt?)"
        ),
        reason_code: OFF_HOST_CODE.to_owned(),
        policy_revision: policy.revision().to_owned(),
        hint: None,
    }
}

#[cfg(test)]
mod tests;
