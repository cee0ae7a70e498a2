//! Dialing origins: resolve once, check every answer, connect only to an address that
//! passed (docs/policy.md invariant 1), with TCP_NODELAY and a connect timeout.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a destination was not dialed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The URI names no host.
    #[error("the request names no host")]
    NoHost,
    /// DNS resolution failed or gave no address.
    #[error("cannot resolve {host}")]
    Resolve {
        /// The host.
        host: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The destination is one of airlock's own listeners; never allowed.
    #[error("{addr} is one of airlock's own listeners")]
    OwnListener {
        /// The address.
        addr: SocketAddr,
    },
    /// Every address the host resolved to is private and no rule allows it.
    #[error("{host} resolves to {addr}, a private or special-purpose address that no allow_private names")]
    Private {
        /// The host.
        host: String,
        /// The refused address.
        addr: IpAddr,
    },
    /// Connecting failed.
    #[error("cannot connect to {addr}")]
    Connect {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Connecting took longer than the connect timeout.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    Timeout {
        /// The address.
        addr: SocketAddr,
        /// The timeout.
        timeout: Duration,
    },
}

/// Whether `ip` is in a range that is unreachable unless a rule's `allow_private` names it:
/// loopback, RFC 1918, link-local, CGNAT (RFC 6598), ULA (RFC 4193), unspecified,
/// multicast, broadcast, documentation, and IPv6 forms that embed IPv4.
pub fn is_special_purpose(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b))
                || a == 0
                || a >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_special_purpose(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00 // ULA fc00::/7
                || (seg[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (seg[0] == 0x64 && seg[1] == 0xff9b) // NAT64 64:ff9b::/96 and /48
                || seg[0] == 0x2002 // 6to4
                || (seg[0] == 0x2001 && seg[1] == 0) // Teredo 2001::/32
                || (seg[0] == 0 && seg[1] == 0 && seg[2] == 0 && seg[3] == 0 && seg[4] == 0)
            // IPv4-compatible
        }
    }
}

impl DialError {
    /// The `airlock-error` code when this is a refusal of the destination itself (airlock's
    /// own listener, a private address no rule allows), `None` for failures to reach it.
    pub fn refusal_code(&self) -> Option<&'static str> {
        match self {
            DialError::OwnListener { .. } => Some("airlock_listener"),
            DialError::Private { .. } => Some("private_address"),
            _ => None,
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it names; any other
/// address unchanged. Checks run on this form so a mapped spelling cannot slip past them.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Whether `ip` is assigned to an interface of this machine (binding a socket to it
/// succeeds only then).
fn is_local_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Which special-purpose addresses a destination may resolve to: the policy in force
/// (`allow_private`, docs/policy.md invariant 1). The data plane's policy store
/// implements it, so the dialer always asks the policy of the moment (hot reload).
pub trait PrivateAccess: Send + Sync {
    /// Whether `host:port` may be dialed at the special-purpose address `ip`.
    fn allows_private(&self, host: &str, port: u16, ip: IpAddr) -> bool;
}

/// The connector under the upstream HTTPS client.
#[derive(Clone)]
pub struct Dialer {
    policy: Arc<dyn PrivateAccess>,
    /// airlock's own listeners; shared by every clone, so a listener opened later (a run's
    /// bound proxy port) is refused by all of them.
    own: Arc<std::sync::RwLock<Vec<SocketAddr>>>,
    connect_timeout: Duration,
    /// `--resolve` answers, by lower-case host.
    static_answers: Arc<std::collections::HashMap<String, Vec<IpAddr>>>,
}

impl Dialer {
    /// A dialer that refuses `own` (airlock's listeners) and private addresses the policy
    /// does not allow.
    pub fn new(
        policy: Arc<dyn PrivateAccess>,
        own: Vec<SocketAddr>,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            policy,
            own: Arc::new(std::sync::RwLock::new(own)),
            connect_timeout,
            static_answers: Arc::default(),
        }
    }

    /// Answers these hosts from `answers` instead of DNS (`--resolve`). The answers are
    /// checked exactly as resolver answers are.
    pub fn with_static_answers(mut self, answers: Vec<(String, Vec<IpAddr>)>) -> Self {
        self.static_answers = Arc::new(
            answers
                .into_iter()
                .map(|(host, ips)| (host.to_ascii_lowercase(), ips))
                .collect(),
        );
        self
    }

    /// Adds a listener opened after the dialer was built (a run's bound proxy port) to the
    /// addresses every clone of this dialer refuses.
    pub fn add_own(&self, addr: SocketAddr) {
        self.own
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(addr);
    }

    /// Removes a listener [`Dialer::add_own`] added, once it is closed.
    pub fn remove_own(&self, addr: SocketAddr) {
        self.own
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|own| *own != addr);
    }

    /// Whether dialing `addr` would reach one of airlock's own listeners: the same port
    /// and the same address, where a listener on an unspecified address is reached through
    /// loopback, the unspecified address, or any address of this machine's interfaces.
    fn is_own(&self, addr: SocketAddr) -> bool {
        let ip = canonical_ip(addr.ip());
        let own = self.own.read().unwrap_or_else(|e| e.into_inner());
        own.iter().any(|own| {
            let own_ip = canonical_ip(own.ip());
            own.port() == addr.port()
                && (own_ip == ip
                    || ip.is_unspecified()
                    || (own_ip.is_unspecified() && (ip.is_loopback() || is_local_address(ip))))
        })
    }

    /// Resolves `host:port` once and returns the addresses that pass the checks.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, DialError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let answers: Vec<SocketAddr> = match self
            .static_answers
            .get(&bare.trim_end_matches('.').to_ascii_lowercase())
        {
            Some(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect(),
            None => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|source| DialError::Resolve {
                    host: host.to_owned(),
                    source,
                })?
                .collect(),
        };
        if answers.is_empty() {
            return Err(DialError::Resolve {
                host: host.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no addresses"),
            });
        }
        let mut refused = None;
        let mut passed = Vec::new();
        for addr in answers {
            let addr = SocketAddr::new(canonical_ip(addr.ip()), addr.port());
            match self.check(host, bare, addr) {
                Ok(()) => passed.push(addr),
                Err(own @ DialError::OwnListener { .. }) => return Err(own),
                Err(private) => {
                    refused.get_or_insert(private);
                }
            }
        }
        match (passed.is_empty(), refused) {
            (true, Some(error)) => Err(error),
            _ => Ok(passed),
        }
    }

    /// The checks one address passes before it is dialed: not airlock's own listener, and
    /// special-purpose only where the policy's `allow_private` names it for `bare:port`.
    fn check(&self, host: &str, bare: &str, addr: SocketAddr) -> Result<(), DialError> {
        if self.is_own(addr) {
            return Err(DialError::OwnListener { addr });
        }
        if is_special_purpose(addr.ip())
            && !self.policy.allows_private(bare, addr.port(), addr.ip())
        {
            return Err(DialError::Private {
                host: host.to_owned(),
                addr: addr.ip(),
            });
        }
        Ok(())
    }

    /// When `host` is an IP literal (`127.0.0.1`, `[::1]`), the checks [`Dialer::resolve`]
    /// would run on it, without dialing; `Ok` for a name, which is checked when it is
    /// resolved. A `CONNECT` to a literal that can never be dialed is refused at once with
    /// this (docs/policy.md invariant 1).
    ///
    /// # Errors
    /// [`DialError::OwnListener`] or [`DialError::Private`].
    pub fn check_literal(&self, host: &str, port: u16) -> Result<(), DialError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.check(host, bare, SocketAddr::new(canonical_ip(ip), port)),
            Err(_) => Ok(()),
        }
    }

    async fn dial(self, uri: Uri) -> Result<TokioIo<TcpStream>, DialError> {
        let host = uri.host().ok_or(DialError::NoHost)?.to_owned();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let addrs = self.resolve(&host, port).await?;
        let mut last = None;
        for addr in addrs {
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    // Nagle off: small writes go at once (docs/performance.md: 5.75x on 64 KiB).
                    let _ = stream.set_nodelay(true);
                    return Ok(TokioIo::new(stream));
                }
                Ok(Err(source)) => last = Some(DialError::Connect { addr, source }),
                Err(_) => {
                    last = Some(DialError::Timeout {
                        addr,
                        timeout: self.connect_timeout,
                    })
                }
            }
        }
        Err(last.unwrap_or(DialError::NoHost))
    }
}

impl tower::Service<Uri> for Dialer {
    type Response = TokioIo<TcpStream>;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, DialError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().dial(uri))
    }
}

/// Finds a [`DialError`] in an error's source chain.
pub fn find_dial_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a DialError> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(dial) = e.downcast_ref::<DialError>() {
            return Some(dial);
        }
        current = e.source();
    }
    None
}

/// Parses one `--resolve HOST=IP[,IP…]` argument.
///
/// # Errors
/// A message naming what is wrong: no `=`, an empty host, or an address that does not parse.
pub fn parse_resolve(raw: &str) -> Result<(String, Vec<IpAddr>), String> {
    let (host, ips) = raw
        .split_once('=')
        .ok_or_else(|| format!("{raw:?}: expected HOST=IP[,IP...]"))?;
    if host.is_empty() {
        return Err(format!("{raw:?}: the host is empty"));
    }
    let ips = ips
        .split(',')
        .map(|ip| {
            ip.trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .map_err(|e| format!("{raw:?}: {ip:?} is not an IP address ({e})"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((host.to_owned(), ips))
}
