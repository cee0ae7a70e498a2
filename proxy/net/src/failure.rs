//! Why a request to an origin failed, read from the typed errors of the upstream client,
//! hyper, the dialer, `std::io` and rustls (never from message text). The data plane's
//! answer and hint follow from it ([`crate::respond::ProxyError::upstream`]).

/// What kind of failure a request to an origin met, read from the error's types (never
/// from its message): the data plane's answer and hint follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Resolving or connecting failed.
    Connect,
    /// Connecting or waiting for the origin's answer took too long.
    TimedOut,
    /// The origin closed the connection before its answer was complete.
    Closed,
    /// The origin's response head is over the client's limits (`http1_max_headers`,
    /// `http1_max_buf_size`; hyper's `is_parse_too_large`).
    HeadTooLarge,
    /// The origin presents a CA certificate as its own (webpki's `CaUsedAsEndEntity`).
    CaAsEndEntity,
    /// The origin's certificate was not trusted (rustls's `InvalidCertificate`).
    UntrustedCertificate,
    /// Another TLS failure (an alert, no common protocol version or cipher suite).
    Tls,
    /// The origin answered, but airlock withholds the answer (e.g. a coding it cannot
    /// search for a credential it placed).
    Withheld,
    /// Anything else (an HTTP protocol error, a dropped request).
    Other,
}

impl Failure {
    /// Classifies an error of the upstream client (or the dialer) by walking its sources:
    /// `hyper_util`'s client error, hyper's errors, [`DialError`](crate::dial::DialError),
    /// `std::io::Error` kinds and rustls's errors. A deeper cause is more specific and wins.
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        use crate::dial::DialError;
        let mut found = Failure::Other;
        for cause in causes(error) {
            if let Some(error) = cause.downcast_ref::<hyper::Error>() {
                if error.is_parse_too_large() {
                    return Failure::HeadTooLarge;
                }
                if error.is_timeout() {
                    found = Failure::TimedOut;
                } else if error.is_incomplete_message() || error.is_canceled() {
                    found = Failure::Closed;
                }
            } else if let Some(error) = cause.downcast_ref::<rustls::Error>() {
                return Failure::of_tls(error);
            } else if let Some(error) = cause.downcast_ref::<DialError>() {
                found = match error {
                    DialError::Timeout { .. } => Failure::TimedOut,
                    _ => Failure::Connect,
                };
            } else if let Some(error) = cause.downcast_ref::<hyper_util::client::legacy::Error>() {
                if error.is_connect() {
                    found = Failure::Connect;
                }
            } else if let Some(error) = cause.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind;
                match error.kind() {
                    ErrorKind::TimedOut => found = Failure::TimedOut,
                    ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable => {
                        found = Failure::Connect;
                    }
                    ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof => found = Failure::Closed,
                    _ => {}
                }
            }
        }
        found
    }

    /// Whether the failure is the origin's TLS certificate not being trusted
    /// (`--upstream-ca` is the operator's remedy).
    pub fn is_untrusted_certificate(self) -> bool {
        matches!(self, Failure::UntrustedCertificate | Failure::CaAsEndEntity)
    }

    fn of_tls(error: &rustls::Error) -> Self {
        use rustls::{CertificateError, Error};
        match error {
            Error::InvalidCertificate(CertificateError::Other(other))
                if matches!(
                    other.0.downcast_ref::<webpki::Error>(),
                    Some(webpki::Error::CaUsedAsEndEntity)
                ) =>
            {
                Failure::CaAsEndEntity
            }
            Error::InvalidCertificate(_) | Error::NoCertificatesPresented => {
                Failure::UntrustedCertificate
            }
            _ => Failure::Tls,
        }
    }
}

/// Whether `error` (of the upstream client) proves that no byte of the request was
/// written: it happened while connecting, that is resolving, dialing or the TLS
/// handshake (certificate verification included), before the client writes anything.
/// Read from types: `hyper_util`'s client error says `is_connect`, or the dialer's own
/// [`DialError`](crate::dial::DialError) is a cause. Anything else (a reset, a closed
/// connection, a protocol error) may come after the request started, so it is not proof.
pub fn nothing_sent(error: &(dyn std::error::Error + 'static)) -> bool {
    causes(error).any(|cause| {
        cause
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(hyper_util::client::legacy::Error::is_connect)
            || cause.downcast_ref::<crate::dial::DialError>().is_some()
    })
}

/// An error and its causes, outermost first. An `std::io::Error` wrapping another error
/// yields that error next: `io::Error::source` skips it (it returns the inner error's
/// source), and TLS failures arrive as such wrappers.
fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |error| {
        match error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Failure;
    use crate::dial::DialError;
    use std::sync::Arc;

    fn tls(error: rustls::Error) -> std::io::Error {
        // How tokio-rustls hands a handshake failure to hyper-rustls.
        std::io::Error::new(std::io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn tls_failures_are_read_through_the_io_error_that_wraps_them() {
        let ca = rustls::Error::InvalidCertificate(rustls::CertificateError::Other(
            rustls::OtherError(Arc::new(webpki::Error::CaUsedAsEndEntity)),
        ));
        assert_eq!(Failure::of(&tls(ca)), Failure::CaAsEndEntity);
        let unknown = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert_eq!(Failure::of(&tls(unknown)), Failure::UntrustedCertificate);
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        assert_eq!(Failure::of(&tls(alert)), Failure::Tls);
    }

    #[test]
    fn only_connect_failures_prove_nothing_was_sent() {
        let refused = DialError::Connect {
            addr: "127.0.0.1:1".parse().expect("literal address"),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        assert!(super::nothing_sent(&refused));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!super::nothing_sent(&reset));
        let text = std::io::Error::other("connect error: dial refused");
        assert!(!super::nothing_sent(&text));
    }

    #[test]
    fn dial_and_io_failures_are_classified_by_type() {
        let timeout = DialError::Timeout {
            addr: "127.0.0.1:1".parse().expect("literal address"),
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(Failure::of(&timeout), Failure::TimedOut);
        let refused = DialError::Connect {
            addr: "127.0.0.1:1".parse().expect("literal address"),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        assert_eq!(Failure::of(&refused), Failure::Connect);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(Failure::of(&reset), Failure::Closed);
        // Text that names a cause is not a cause.
        let text = std::io::Error::other("message head is too large: CaUsedAsEndEntity");
        assert_eq!(Failure::of(&text), Failure::Other);
    }
}
