//! Typed matchers: host, port, scheme, method and path.
//!
//! Each matcher is parsed once at load time (`parse` returns a lower-case
//! problem sentence) and then only answers `matches`. Request-side values are
//! normalised first ([`Host::parse`], [`CanonicalPath::parse`]) so matchers
//! never see raw client spellings.

use std::fmt;
use std::net::IpAddr;

use crate::{RequestFacts, Scheme};

/// The longest DNS name, in bytes, without the trailing dot.
const MAX_HOST_LEN: usize = 253;
/// The longest DNS label, in bytes.
const MAX_LABEL_LEN: usize = 63;

/// A request's destination host after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A DNS name: lower-case ASCII, no trailing dot.
    Name(String),
    /// An IP literal (IPv6 given with or without brackets).
    Ip(IpAddr),
}

impl Host {
    /// Normalises a host as a client sent it; `None` when it is not a host at all.
    pub(crate) fn parse(raw: &str) -> Option<Host> {
        let unbracketed = raw
            .strip_prefix('[')
            .and_then(|inner| inner.strip_suffix(']'));
        if let Some(inner) = unbracketed {
            return match inner.parse::<IpAddr>() {
                Ok(ip @ IpAddr::V6(_)) => Some(Host::Ip(ip)),
                _ => None,
            };
        }
        let raw = raw.strip_suffix('.').unwrap_or(raw);
        if let Ok(ip) = raw.parse::<IpAddr>() {
            return Some(Host::Ip(ip));
        }
        let name = raw.to_ascii_lowercase();
        if name.is_empty() || name.len() > MAX_HOST_LEN {
            return None;
        }
        if !name.split('.').all(valid_label) {
            return None;
        }
        Some(Host::Name(name))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL_LEN
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A rule's `host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// `api.example.com`
    Exact(String),
    /// `127.0.0.1`, `::1`, `[::1]`
    Ip(IpAddr),
    /// `*.example.com`: exactly one more label (holds `example.com`).
    OneLabel(String),
    /// `**.example.com`: one or more labels (holds `example.com`).
    AnyDepth(String),
}

impl HostPattern {
    pub(crate) fn parse(raw: &str) -> Result<HostPattern, String> {
        if raw == "*" || raw == "**" {
            return Err(format!("wildcard \"{raw}\" alone matches every host"));
        }
        if !raw.is_ascii() {
            return Err(format!(
                "host \"{raw}\" is not ASCII; write its punycode (xn--) form"
            ));
        }
        let (wildcard, rest) = if let Some(rest) = raw.strip_prefix("**.") {
            (
                Some(HostPattern::AnyDepth as fn(String) -> HostPattern),
                rest,
            )
        } else if let Some(rest) = raw.strip_prefix("*.") {
            (
                Some(HostPattern::OneLabel as fn(String) -> HostPattern),
                rest,
            )
        } else {
            (None, raw)
        };
        if wildcard.is_none() {
            match Host::parse(raw) {
                Some(Host::Ip(ip)) => return Ok(HostPattern::Ip(ip)),
                Some(Host::Name(name)) => return Ok(HostPattern::Exact(name)),
                None => {}
            }
        }
        if rest.contains('*') {
            return Err(format!(
                "host \"{raw}\": a wildcard may only be the whole first label (\"*.\" or \"**.\")"
            ));
        }
        if rest.contains(':') || rest.contains('[') {
            return Err(format!(
                "host \"{raw}\" is not a host name or IP address (put ports in \"port\")"
            ));
        }
        let Some(Host::Name(suffix)) = Host::parse(rest) else {
            return Err(format!("host \"{raw}\" is not a valid host name"));
        };
        let Some(wildcard) = wildcard else {
            return Ok(HostPattern::Exact(suffix));
        };
        let labels = suffix.split('.').count();
        if labels < 2 {
            return Err(format!(
                "wildcard \"{raw}\" covers a whole top-level domain"
            ));
        }
        if suffix
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(format!(
                "wildcard \"{raw}\" looks like an IP address; IP literals match exactly"
            ));
        }
        Ok(wildcard(suffix))
    }

    pub(crate) fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Ip(want), Host::Ip(got)) => want == got,
            (HostPattern::Exact(want), Host::Name(got)) => want == got,
            (HostPattern::OneLabel(suffix), Host::Name(got)) => {
                subdomain_prefix(got, suffix).is_some_and(|prefix| !prefix.contains('.'))
            }
            (HostPattern::AnyDepth(suffix), Host::Name(got)) => {
                subdomain_prefix(got, suffix).is_some()
            }
            _ => false,
        }
    }
}

/// `Some("a.b")` for `host = "a.b.example.com"`, `suffix = "example.com"`.
fn subdomain_prefix<'h>(host: &'h str, suffix: &str) -> Option<&'h str> {
    let prefix = host.strip_suffix(suffix)?.strip_suffix('.')?;
    (!prefix.is_empty()).then_some(prefix)
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(name) => f.write_str(name),
            HostPattern::Ip(ip) => write!(f, "{ip}"),
            HostPattern::OneLabel(suffix) => write!(f, "*.{suffix}"),
            HostPattern::AnyDepth(suffix) => write!(f, "**.{suffix}"),
        }
    }
}

/// A rule's `port`; absent means the scheme's default port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PortMatcher {
    /// 443 for https, 80 for http.
    SchemeDefault,
    /// Exactly these ports.
    List(Vec<u16>),
}

impl PortMatcher {
    pub(crate) fn parse(raw: Option<Vec<i64>>) -> Result<PortMatcher, String> {
        let Some(raw) = raw else {
            return Ok(PortMatcher::SchemeDefault);
        };
        if raw.is_empty() {
            return Err(
                "empty list matches no port; remove \"port\" for the scheme default".into(),
            );
        }
        let mut ports = Vec::with_capacity(raw.len());
        for port in raw {
            match u16::try_from(port) {
                Ok(port) if port != 0 => ports.push(port),
                _ => return Err(format!("{port} is not a port (1 to 65535)")),
            }
        }
        Ok(PortMatcher::List(ports))
    }

    pub(crate) fn matches(&self, scheme: Scheme, port: u16) -> bool {
        match self {
            PortMatcher::SchemeDefault => port == scheme.default_port(),
            PortMatcher::List(ports) => ports.contains(&port),
        }
    }
}

/// A rule's `method`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MethodMatcher {
    /// GET, HEAD, OPTIONS or TRACE without a body.
    Read,
    /// Anything that is not a read, including a GET with a body.
    Write,
    /// Exactly these methods (upper-case), body or not.
    List(Vec<String>),
}

impl MethodMatcher {
    pub(crate) fn parse(raw: Vec<String>) -> Result<MethodMatcher, String> {
        if let [only] = raw.as_slice() {
            if only.eq_ignore_ascii_case("read") {
                return Ok(MethodMatcher::Read);
            }
            if only.eq_ignore_ascii_case("write") {
                return Ok(MethodMatcher::Write);
            }
        }
        if raw.is_empty() {
            return Err("empty list matches no method; remove \"method\" to match all".into());
        }
        let mut methods = Vec::with_capacity(raw.len());
        for method in raw {
            if method.eq_ignore_ascii_case("read") || method.eq_ignore_ascii_case("write") {
                return Err(format!(
                    "preset \"{method}\" must be written alone (method = \"{method}\"), not in a list"
                ));
            }
            if method.is_empty() || !method.bytes().all(is_token_byte) {
                return Err(format!("\"{method}\" is not an HTTP method"));
            }
            methods.push(method.to_ascii_uppercase());
        }
        Ok(MethodMatcher::List(methods))
    }

    /// Whether the request's method matches: [`ReadCheck::Read`] for a match,
    /// [`ReadCheck::NotRead`] for none, [`ReadCheck::NeedsBody`] when `read` or `write`
    /// can only tell from the body (a POST that may be a GraphQL query; see `read.rs`).
    /// `body_limit` is the most body bytes the rule reads.
    pub(crate) fn check(
        &self,
        request: &RequestFacts<'_>,
        path: &CanonicalPath,
        body_limit: u64,
    ) -> ReadCheck {
        let yes = |matched: bool| {
            if matched {
                ReadCheck::Read
            } else {
                ReadCheck::NotRead
            }
        };
        match self {
            MethodMatcher::Read => read::classify(request, path, body_limit),
            MethodMatcher::Write => match read::classify(request, path, body_limit) {
                ReadCheck::Read => ReadCheck::NotRead,
                ReadCheck::NotRead => ReadCheck::Read,
                ReadCheck::NeedsBody => ReadCheck::NeedsBody,
            },
            MethodMatcher::List(methods) => yes(methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(request.method))),
        }
    }

    /// [`MethodMatcher::check`] on the request line alone, for tests: no headers, no body.
    #[cfg(test)]
    pub(crate) fn matches(&self, method: &str, has_body: bool) -> bool {
        let request = RequestFacts::new(Scheme::Https, "a.example", 443, method, "/", has_body);
        let path = CanonicalPath::parse("/").expect("canonical");
        self.check(&request, &path, 0) == ReadCheck::Read
    }
}

/// RFC 9110 `tchar`.
pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why a request path cannot be matched safely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NonCanonical {
    NoLeadingSlash,
    EncodedSlash,
    Backslash,
    DotSegment,
    EmptySegment,
    BadPercentEncoding,
    DoubleEncoding,
    ControlByte,
}

impl NonCanonical {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            NonCanonical::NoLeadingSlash => "path does not start with \"/\"",
            NonCanonical::EncodedSlash => "path contains an encoded slash (%2F)",
            NonCanonical::Backslash => "path contains a backslash, raw or encoded",
            NonCanonical::DotSegment => "path contains a \".\" or \"..\" segment, raw or encoded",
            NonCanonical::EmptySegment => "path contains an empty segment (\"//\")",
            NonCanonical::BadPercentEncoding => "path contains invalid percent-encoding",
            NonCanonical::DoubleEncoding => {
                "path is percent-encoded twice (%25 followed by hex digits); origins may decode it again"
            }
            NonCanonical::ControlByte => "path contains a control byte (such as %00), raw or encoded",
        }
    }
}

/// A request path, percent-decoded and split into segments.
///
/// `/` is one empty segment; a trailing slash is a final empty segment. Any
/// spelling an origin might read differently from us is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CanonicalPath {
    segments: Vec<Vec<u8>>,
}

impl CanonicalPath {
    pub(crate) fn parse(raw: &str) -> Result<CanonicalPath, NonCanonical> {
        let raw = if raw.is_empty() { "/" } else { raw };
        let rest = raw.strip_prefix('/').ok_or(NonCanonical::NoLeadingSlash)?;
        let raw_segments: Vec<&str> = rest.split('/').collect();
        let last = raw_segments.len() - 1;
        let mut segments = Vec::with_capacity(raw_segments.len());
        for (index, raw_segment) in raw_segments.into_iter().enumerate() {
            let segment = percent_decode(raw_segment)?;
            if segment.contains(&b'/') {
                return Err(NonCanonical::EncodedSlash);
            }
            if segment.contains(&b'\\') {
                return Err(NonCanonical::Backslash);
            }
            if segment == b"." || segment == b".." {
                return Err(NonCanonical::DotSegment);
            }
            if segment.iter().any(|b| b.is_ascii_control()) {
                return Err(NonCanonical::ControlByte);
            }
            if segment
                .windows(3)
                .any(|w| w[0] == b'%' && hex_value(w[1]).is_some() && hex_value(w[2]).is_some())
            {
                return Err(NonCanonical::DoubleEncoding);
            }
            if segment.is_empty() && index != last {
                return Err(NonCanonical::EmptySegment);
            }
            segments.push(segment);
        }
        Ok(CanonicalPath { segments })
    }

    /// The last segment, decoded (empty for `/` and after a trailing slash).
    pub(crate) fn last_segment(&self) -> &[u8] {
        self.segments.last().map_or(&[], Vec::as_slice)
    }
}

fn percent_decode(raw: &str) -> Result<Vec<u8>, NonCanonical> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .ok_or(NonCanonical::BadPercentEncoding)?;
            let hi = hex_value(hex[0]).ok_or(NonCanonical::BadPercentEncoding)?;
            let lo = hex_value(hex[1]).ok_or(NonCanonical::BadPercentEncoding)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// One segment of a path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathSegment {
    /// Matches exactly these bytes.
    Literal(Vec<u8>),
    /// `*`: exactly one non-empty segment.
    One,
    /// `**`: zero or more segments.
    Any,
    /// `v1.*.json`: one segment; `*` matches any run of bytes inside it.
    Glob(Vec<Vec<u8>>),
}

/// A rule's `path`: a segment-aware glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathPattern {
    source: String,
    segments: Vec<PathSegment>,
}

impl PathPattern {
    pub(crate) fn parse(raw: &str) -> Result<PathPattern, String> {
        let canonical = CanonicalPath::parse(raw)
            .map_err(|problem| format!("pattern \"{raw}\": {}", problem.describe()))?;
        let mut segments = Vec::with_capacity(canonical.segments.len());
        for segment in canonical.segments {
            segments.push(match segment.as_slice() {
                b"**" => PathSegment::Any,
                b"*" => PathSegment::One,
                s if s.windows(2).any(|w| w == b"**") => {
                    return Err(format!("pattern \"{raw}\": \"**\" must be a whole segment"))
                }
                s if s.contains(&b'*') => {
                    PathSegment::Glob(s.split(|&b| b == b'*').map(<[u8]>::to_vec).collect())
                }
                _ => PathSegment::Literal(segment),
            });
        }
        Ok(PathPattern {
            source: raw.to_owned(),
            segments,
        })
    }

    pub(crate) fn matches(&self, path: &CanonicalPath) -> bool {
        match_segments(&self.segments, &path.segments)
    }

    /// One path this pattern matches (`*` -> `x`, `**` -> `x`), percent-encoded where
    /// needed; for `policy diff` probes.
    pub(crate) fn sample(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            out.push('/');
            let bytes: Vec<u8> = match segment {
                PathSegment::Literal(bytes) => bytes.clone(),
                PathSegment::One | PathSegment::Any => b"x".to_vec(),
                PathSegment::Glob(parts) => parts.join(&b'x'),
            };
            for byte in bytes {
                if byte.is_ascii_alphanumeric() || b"-._~!$&'()+,;=:@".contains(&byte) {
                    out.push(char::from(byte));
                } else {
                    out.push_str(&format!("%{byte:02X}"));
                }
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        out
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Dynamic programming over (pattern, path) positions: linear in their product,
/// whatever the number of `**`.
fn match_segments(pattern: &[PathSegment], path: &[Vec<u8>]) -> bool {
    // reachable[j]: pattern[..i] can consume exactly path[..j].
    let mut reachable = vec![false; path.len() + 1];
    reachable[0] = true;
    for segment in pattern {
        let mut next = vec![false; path.len() + 1];
        for j in 0..=path.len() {
            if !reachable[j] {
                continue;
            }
            match segment {
                PathSegment::Any => next[j..].iter_mut().for_each(|cell| *cell = true),
                _ => {
                    if let Some(candidate) = path.get(j) {
                        if segment_matches(segment, candidate) {
                            next[j + 1] = true;
                        }
                    }
                }
            }
        }
        reachable = next;
    }
    reachable[path.len()]
}

fn segment_matches(segment: &PathSegment, candidate: &[u8]) -> bool {
    match segment {
        PathSegment::Literal(literal) => literal == candidate,
        PathSegment::One => !candidate.is_empty(),
        PathSegment::Any => true,
        PathSegment::Glob(parts) => glob_matches(parts, candidate),
    }
}

/// `parts` are the pieces between `*`s: the first anchors the start, the last
/// the end, the middle ones are found left to right (greedy is optimal here).
pub(crate) fn glob_matches(parts: &[Vec<u8>], candidate: &[u8]) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return true;
    };
    if parts.len() == 1 {
        return first == candidate;
    }
    if candidate.len() < first.len() + last.len()
        || !candidate.starts_with(first)
        || !candidate.ends_with(last)
    {
        return false;
    }
    let mut middle = &candidate[first.len()..candidate.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        if part.is_empty() {
            continue;
        }
        match middle
            .windows(part.len())
            .position(|w| w == part.as_slice())
        {
            Some(at) => middle = &middle[at + part.len()..],
            None => return false,
        }
    }
    true
}

mod cover;
mod hosts;
mod read;

pub(crate) use hosts::HostSet;
pub(crate) use read::{ReadCheck, READ_METHODS};

#[cfg(test)]
mod tests;
