//! The probe requests `policy diff` decides under both policies.

use std::collections::BTreeSet;

use crate::matcher::{HostPattern, MethodMatcher, PortMatcher};
use crate::{RequestBody, RequestFacts, Rule, Scheme};

/// A probe request (owned).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Probe {
    pub(super) scheme: &'static str,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) method: String,
    pub(super) path: String,
    /// The raw query, without `?` (`""`: none).
    pub(super) query: String,
    /// Header lines (lower-case names).
    pub(super) headers: Vec<(String, String)>,
    /// The body, when the probe carries one the policy may read.
    pub(super) body: Option<String>,
}

impl Probe {
    /// A probe of the request line only: no query, headers or body to read.
    pub(super) fn line(
        scheme: &'static str,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
    ) -> Probe {
        Probe {
            scheme,
            host: host.to_owned(),
            port,
            method: method.to_owned(),
            path: path.to_owned(),
            query: String::new(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// The header lines as [`RequestFacts::headers`] wants them.
    pub(super) fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect()
    }

    /// The facts of this probe; `headers` from [`Probe::header_pairs`].
    pub(super) fn facts<'a>(&'a self, headers: &'a [(&'a str, &'a str)]) -> RequestFacts<'a> {
        RequestFacts {
            query: &self.query,
            headers,
            body: self.body.as_deref().map_or(RequestBody::NotRead, |body| {
                RequestBody::Read(body.as_bytes())
            }),
            ..RequestFacts::new(
                if self.scheme == "https" {
                    Scheme::Https
                } else {
                    Scheme::Http
                },
                &self.host,
                self.port,
                &self.method,
                &self.path,
                self.body.is_some() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH"),
            )
        }
    }

    /// The probe's URL, with its query.
    pub(super) fn url(&self) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        let query = if self.query.is_empty() {
            String::new()
        } else {
            format!("?{}", self.query)
        };
        if self.port == default {
            format!("{}://{}{}{query}", self.scheme, self.host, self.path)
        } else {
            format!(
                "{}://{}:{}{}{query}",
                self.scheme, self.host, self.port, self.path
            )
        }
    }
}

/// The probes that exercise `rule`: each scheme and port it can match, each method it
/// names (GET and POST for presets or no method), for each of its hosts, its path pattern instantiated; and for
/// a rule with content conditions, the same requests again carrying a query, headers and
/// body that satisfy them (a body only on methods that may carry one).
pub(super) fn probes_of(rule: &Rule, out: &mut BTreeSet<Probe>) {
    for host in rule.host.iter().map(sample_host) {
        probes_for_host(rule, &host, out);
    }
}

/// [`probes_of`] for one host of the rule's `host` list.
fn probes_for_host(rule: &Rule, host: &str, out: &mut BTreeSet<Probe>) {
    let schemes: Vec<Scheme> = match rule.scheme {
        Some(scheme) => vec![scheme],
        None => vec![Scheme::Https, Scheme::Http],
    };
    let methods: Vec<String> = match &rule.method {
        Some(MethodMatcher::List(methods)) => methods.clone(),
        Some(MethodMatcher::Read) => vec!["GET".into()],
        Some(MethodMatcher::Write) => vec!["POST".into(), "DELETE".into()],
        None => vec!["GET".into(), "POST".into()],
    };
    let path = match &rule.path {
        Some(pattern) => pattern.sample(),
        None => "/".to_owned(),
    };
    let query = rule
        .query
        .as_ref()
        .map(|matcher| form_encode(&matcher.sample()))
        .unwrap_or_default();
    let headers = rule
        .headers
        .as_ref()
        .map(|matcher| matcher.sample())
        .unwrap_or_default();
    let body = rule.body.as_ref().and_then(|matcher| matcher.sample());
    let has_content = !query.is_empty() || !headers.is_empty() || body.is_some();
    for scheme in schemes {
        let ports = match &rule.port {
            PortMatcher::SchemeDefault => vec![scheme.default_port()],
            PortMatcher::List(ports) => ports.clone(),
        };
        for port in ports {
            for method in &methods {
                let line = Probe::line(scheme.as_str(), host, port, method, &path);
                if has_content {
                    // A body would make a read a write: a `read` rule's probe carries the
                    // rest only.
                    let carries_body = !matches!(rule.method, Some(MethodMatcher::Read));
                    out.insert(Probe {
                        query: query.clone(),
                        headers: headers.clone(),
                        body: if carries_body { body.clone() } else { None },
                        ..line.clone()
                    });
                }
                out.insert(line);
            }
        }
    }
}

fn sample_host(pattern: &HostPattern) -> String {
    match pattern {
        HostPattern::Exact(name) => name.clone(),
        HostPattern::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        HostPattern::Ip(ip) => ip.to_string(),
        HostPattern::OneLabel(suffix) => format!("sample.{suffix}"),
        HostPattern::AnyDepth(suffix) => format!("deep.sample.{suffix}"),
    }
}

/// `application/x-www-form-urlencoded` serialisation (WHATWG URL §5.2): unreserved bytes
/// as they are, a space as `+`, everything else `%XX`.
fn form_encode(pairs: &[(String, String)]) -> String {
    let encode = |text: &str| {
        let mut out = String::with_capacity(text.len());
        for byte in text.bytes() {
            match byte {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    out.push(char::from(byte));
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{byte:02X}")),
            }
        }
        out
    };
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}
