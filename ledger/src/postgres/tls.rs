//! TLS to the PostgreSQL server: libpq's `sslmode` and `sslrootcert` parameters
//! (<https://www.postgresql.org/docs/current/libpq-ssl.html>, "SSL Mode Descriptions"),
//! spoken with rustls (ring) through `tokio-postgres-rustls`.
//!
//! The driver's own parser knows `sslmode` `disable`, `prefer` and `require` only and no
//! `sslrootcert`, so [`split`] takes both out of the connection string (URL query or
//! `key=value`) before the driver parses the rest, and [`Tls::decide`] says how to connect:
//!
//! | `sslmode` | no `sslrootcert` | `sslrootcert=FILE` or `system` |
//! |---|---|---|
//! | `disable` | plain | refused (contradictory) |
//! | absent, `prefer` | plain (as libpq when the server has no TLS) | verify-full |
//! | `require` | refused: airlock does not encrypt without verifying | verify-full |
//! | `verify-ca` | refused: needs a root | the chain, not the host name (`system`: refused) |
//! | `verify-full` | refused: needs a root | the chain and the host name |
//!
//! Where libpq differs: it encrypts without verifying for `require` (and for `prefer` when
//! the server offers TLS), verifies the chain only for `require` with a root file, reads
//! `~/.postgresql/root.crt` by default, and refuses `sslmode` below `verify-full` with
//! `sslrootcert=system`. airlock never sends the password over a connection it has not
//! verified, and never falls back to plain once TLS is wanted (the driver is kept in
//! `SslMode::Require`). `system` is the Mozilla root set built into airlock
//! (`webpki-roots`, the roots origins are verified against), not the OS store. The root
//! file is read once, at open. TLS is never used over a unix socket, so a TLS mode with a
//! socket host is refused.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::Arc;

use postgres::config::{Host, SslMode};
use postgres::{Client, NoTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::PgOpenError;

/// The connection-string keys this module handles.
const SSLMODE: &str = "sslmode";
const SSLROOTCERT: &str = "sslrootcert";

/// The `sslrootcert` value that means the built-in public roots (as libpq 16's `system`).
const SYSTEM: &str = "system";

/// A driver configuration and the TLS airlock connects with; it derefs to the driver's
/// `postgres::Config` for everything else.
#[derive(Clone)]
pub(super) struct Config {
    driver: postgres::Config,
    tls: Tls,
}

impl Config {
    /// `driver` connected as `tls` says: the driver's TLS mode is set here (`Disable` for
    /// plain, `Require` for TLS, so it never falls back to plain).
    pub(super) fn new(mut driver: postgres::Config, tls: Tls) -> Self {
        driver.ssl_mode(match tls {
            Tls::Plain => SslMode::Disable,
            Tls::Verified(_) => SslMode::Require,
        });
        Self { driver, tls }
    }

    /// Opens one connection (TLS verified when the URL asked for it).
    ///
    /// Errors: the driver's, among them a TLS handshake that failed (its source names the
    /// certificate problem, e.g. `invalid peer certificate: UnknownIssuer`).
    pub(super) fn connect(&self) -> Result<Client, postgres::Error> {
        match &self.tls {
            Tls::Plain => self.driver.connect(NoTls),
            Tls::Verified(connector) => self.driver.connect(connector.clone()),
        }
    }
}

impl Deref for Config {
    type Target = postgres::Config;

    fn deref(&self) -> &postgres::Config {
        &self.driver
    }
}

impl DerefMut for Config {
    fn deref_mut(&mut self) -> &mut postgres::Config {
        &mut self.driver
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The driver's Debug redacts the password.
        f.debug_struct("Config")
            .field("driver", &self.driver)
            .field("tls", &matches!(self.tls, Tls::Verified(_)))
            .finish()
    }
}

/// How connections are made.
#[derive(Clone)]
pub(super) enum Tls {
    /// Without TLS.
    Plain,
    /// TLS, the server verified as the URL said.
    Verified(MakeRustlsConnect),
}

/// libpq's `sslmode` values that airlock accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Self, PgOpenError> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => {
                return Err(refused(
                    SSLMODE,
                    format!(
                        "unknown value `{}` (airlock knows disable, prefer, require, verify-ca and verify-full)",
                        value.escape_debug()
                    ),
                ))
            }
        })
    }
}

fn refused(parameter: &'static str, reason: String) -> PgOpenError {
    PgOpenError::Tls { parameter, reason }
}

/// `url` without its `sslmode` and `sslrootcert` parameters, and their (decoded) values;
/// the last one wins when a key repeats, as in the driver. Both forms are split as the
/// driver parses them (`tokio-postgres` `Config::from_str`): a `postgres://` or
/// `postgresql://` URL's query after the credentials, or `key=value` pairs. Anything the
/// split cannot make out is left in place for the driver to refuse.
pub(super) fn split(url: &str) -> (String, Option<String>, Option<String>) {
    let mut mode = None;
    let mut root = None;
    let mut take = |key: &str, value: Cow<'_, str>| match key {
        SSLMODE => {
            mode = Some(value.into_owned());
            true
        }
        SSLROOTCERT => {
            root = Some(value.into_owned());
            true
        }
        _ => false,
    };
    let rest = walk(url, &mut take);
    (rest, mode, root)
}

/// Walks `url`'s parameters in whichever form it is written (a `postgres://` or
/// `postgresql://` URL, or `key=value` pairs), calling `take` with each; returns `url`
/// without those `take` answered `true` for.
fn walk(url: &str, take: &mut impl FnMut(&str, Cow<'_, str>) -> bool) -> String {
    match ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| url.strip_prefix(prefix).map(|rest| (prefix, rest)))
    {
        Some((prefix, rest)) => split_url(prefix, rest, take),
        None => split_keywords(url, take),
    }
}

/// libpq's client-certificate parameters, which this store does not support.
const CLIENT_CERTIFICATE: [&str; 5] = ["sslcert", "sslkey", "sslpassword", "sslcrl", "sslcrldir"];

/// The first of libpq's client-certificate parameters (`sslcert`, `sslkey`,
/// `sslpassword`, `sslcrl`, `sslcrldir`) that `url` gives, in either form; `None` when it
/// gives none. The driver would refuse them as unknown options; this names them.
pub(super) fn client_certificate_parameter(url: &str) -> Option<&'static str> {
    let mut found = None;
    let mut look = |key: &str, _: Cow<'_, str>| {
        if found.is_none() {
            found = CLIENT_CERTIFICATE.iter().find(|k| **k == key).copied();
        }
        false
    };
    walk(url, &mut look);
    found
}

/// The URL form: the query starts at the first `?` after the credentials (`…@`); each
/// parameter is `KEY=VALUE` up to the next `&`, percent-encoded.
fn split_url(
    prefix: &str,
    rest: &str,
    take: &mut impl FnMut(&str, Cow<'_, str>) -> bool,
) -> String {
    let after_credentials = rest.find('@').map_or(0, |at| at + 1);
    let Some(query) = rest[after_credentials..]
        .find('?')
        .map(|q| after_credentials + q)
    else {
        return format!("{prefix}{rest}");
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut params = &rest[query + 1..];
    while !params.is_empty() {
        let Some(eq) = params.find('=') else {
            kept.push(params);
            break;
        };
        let end = params[eq..].find('&').map_or(params.len(), |amp| eq + amp);
        let (key, value) = (&params[..eq], &params[eq + 1..end]);
        let decoded = |s: &str| String::from_utf8(percent_decode(s)).ok();
        let taken = match (decoded(key), decoded(value)) {
            (Some(key), Some(value)) => take(&key, Cow::Owned(value)),
            _ => false,
        };
        if !taken {
            kept.push(&params[..end]);
        }
        params = params.get(end + 1..).unwrap_or("");
    }
    let base = &rest[..query];
    if kept.is_empty() {
        format!("{prefix}{base}")
    } else {
        format!("{prefix}{base}?{}", kept.join("&"))
    }
}

/// `%XX` decoding as the driver's (`percent-encoding`): a `%` not followed by two hex
/// digits stays as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// The `key=value` form: whitespace-separated, a value either bare or single-quoted, `\`
/// escaping the next character in both. The kept pairs are written back quoted.
fn split_keywords(url: &str, take: &mut impl FnMut(&str, Cow<'_, str>) -> bool) -> String {
    let mut kept = Vec::new();
    let mut chars = url.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            break;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            return url.to_owned();
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let quoted = chars.next_if_eq(&'\'').is_some();
        let mut value = String::new();
        let mut closed = !quoted;
        while let Some(c) = chars.peek().copied() {
            if quoted && c == '\'' {
                chars.next();
                closed = true;
                break;
            }
            if !quoted && c.is_whitespace() {
                break;
            }
            chars.next();
            if c == '\\' {
                if let Some(escaped) = chars.next() {
                    value.push(escaped);
                }
            } else {
                value.push(c);
            }
        }
        if !closed || (!quoted && value.is_empty()) {
            return url.to_owned();
        }
        if !take(&key, Cow::Borrowed(&value)) {
            let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push(format!("{key}='{escaped}'"));
        }
    }
    kept.join(" ")
}

impl Tls {
    /// How to connect, from `sslmode` and `sslrootcert` (as [`split`] found them) and the
    /// driver's parsed hosts: the table in this module's doc. Reads the root file.
    ///
    /// Errors: [`PgOpenError::Tls`] naming the parameter: an unknown mode, a TLS mode
    /// without a root, `disable` with a root, `verify-ca` with `system`, a root file that
    /// cannot be read or holds no certificate, a TLS mode with a unix-socket host.
    pub(super) fn decide(
        mode: Option<&str>,
        root: Option<&str>,
        hosts: &[Host],
    ) -> Result<Self, PgOpenError> {
        let mode = mode.map(Mode::parse).transpose()?;
        let check_names = match (mode, root) {
            (Some(Mode::Disable), Some(_)) => {
                return Err(refused(
                    SSLROOTCERT,
                    "given with sslmode=disable, which turns TLS off: drop one of them".into(),
                ))
            }
            (Some(Mode::Disable) | Some(Mode::Prefer) | None, None) => return Ok(Self::Plain),
            (Some(mode), None) => {
                return Err(refused(
                    SSLROOTCERT,
                    format!(
                        "sslmode={} needs sslrootcert=FILE (the PEM certificate of the CA that signed the server's) or sslrootcert=system: airlock does not connect over TLS it has not verified",
                        mode_name(mode)
                    ),
                ))
            }
            (Some(Mode::VerifyCa), Some(SYSTEM)) => {
                return Err(refused(
                    SSLMODE,
                    "verify-ca with sslrootcert=system would accept any server with a public certificate: use verify-full".into(),
                ))
            }
            (Some(Mode::VerifyCa), Some(_)) => false,
            (_, Some(_)) => true,
        };
        if let Some(Host::Unix(path)) = hosts.iter().find(|h| matches!(h, Host::Unix(_))) {
            return Err(refused(
                SSLMODE,
                format!(
                    "TLS is not used over a unix socket ({}): use sslmode=disable there, or a TCP host",
                    path.display()
                ),
            ));
        }
        let roots = Arc::new(match root {
            Some(SYSTEM) | None => system_roots(),
            Some(file) => roots_of(file)?,
        });
        Ok(Self::Verified(MakeRustlsConnect::new(client_config(
            roots,
            check_names,
        )?)))
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Disable => "disable",
        Mode::Prefer => "prefer",
        Mode::Require => "require",
        Mode::VerifyCa => "verify-ca",
        Mode::VerifyFull => "verify-full",
    }
}

/// The Mozilla roots built into airlock.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

/// The certificates of PEM file `file`.
///
/// Errors: [`PgOpenError::Tls`] (`sslrootcert`) when it cannot be read, does not parse
/// or holds no certificate.
fn roots_of(file: &str) -> Result<RootCertStore, PgOpenError> {
    let path = PathBuf::from(file);
    let bad = |reason: String| refused(SSLROOTCERT, format!("{}: {reason}", path.display()));
    let pem = std::fs::read(&path).map_err(|e| bad(format!("cannot be read: {e}")))?;
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| bad(format!("is not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("holds a certificate rustls refuses: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no PEM CERTIFICATE block".into()));
    }
    Ok(roots)
}

/// A rustls client (ring) verifying against `roots`, the host name too when
/// `check_names`.
fn client_config(
    roots: Arc<RootCertStore>,
    check_names: bool,
) -> Result<rustls::ClientConfig, PgOpenError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| refused(SSLMODE, format!("rustls: {e}")))?;
    let config = if check_names {
        builder.with_root_certificates(roots)
    } else {
        let chain = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| refused(SSLROOTCERT, format!("rustls: {e}")))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
    };
    Ok(config.with_no_client_auth())
}

/// `verify-ca`: webpki's verification, less its last step, the host name check.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // rustls checks the chain (signatures, validity, usage) before the name, so a
        // name error means the chain was sound.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(url: &str) -> (String, Option<String>, Option<String>) {
        split(url)
    }

    #[test]
    fn client_certificate_parameters_are_named_in_either_form() {
        assert_eq!(
            client_certificate_parameter("postgres://u@h/db?sslmode=verify-full&sslcert=%2Fc.pem"),
            Some("sslcert")
        );
        assert_eq!(
            client_certificate_parameter("host=h dbname=db sslkey='/k.pem' sslmode=require"),
            Some("sslkey")
        );
        assert_eq!(
            client_certificate_parameter("postgres://u:sslcert@h/db?application_name=sslkey"),
            None
        );
    }

    #[test]
    fn urls_lose_the_tls_parameters_and_keep_the_rest() {
        assert_eq!(
            parts("postgres://u:p%3F@h:5/db?sslmode=verify-full&application_name=a&sslrootcert=%2Fetc%2Fca.pem"),
            (
                "postgres://u:p%3F@h:5/db?application_name=a".into(),
                Some("verify-full".into()),
                Some("/etc/ca.pem".into())
            )
        );
        assert_eq!(
            parts("postgresql://u:pa?ss@h/db?sslmode=require"),
            (
                "postgresql://u:pa?ss@h/db".into(),
                Some("require".into()),
                None
            )
        );
        assert_eq!(
            parts("postgres://h/db"),
            ("postgres://h/db".into(), None, None)
        );
        // The last one wins, as in the driver.
        assert_eq!(
            parts("postgres://h/db?sslmode=disable&sslmode=verify-ca").1,
            Some("verify-ca".into())
        );
    }

    #[test]
    fn keywords_lose_the_tls_parameters_and_keep_the_rest_quoted() {
        let (rest, mode, root) = parts(
            "host=db.example port = 5433 password='it\\'s' sslmode=verify-full sslrootcert='/a b/ca.pem'",
        );
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/a b/ca.pem"));
        assert_eq!(rest, "host='db.example' port='5433' password='it\\'s'");
        let config: postgres::Config = rest.parse().expect("the rest parses");
        assert_eq!(config.get_password(), Some(&b"it's"[..]));
        assert_eq!(config.get_ports(), &[5433]);
        // What the split cannot make out goes to the driver as it was.
        assert_eq!(parts("host='open").0, "host='open");
    }

    #[test]
    fn modes_follow_the_table() {
        let tcp = [Host::Tcp("db.example".into())];
        let plain = |mode, root| matches!(Tls::decide(mode, root, &tcp), Ok(Tls::Plain));
        assert!(plain(None, None));
        assert!(plain(Some("prefer"), None));
        assert!(plain(Some("disable"), None));
        let refused_on = |mode, root, hosts: &[Host]| match Tls::decide(mode, root, hosts) {
            Err(PgOpenError::Tls { parameter, .. }) => parameter,
            Err(other) => panic!("{other:?}"),
            Ok(_) => "accepted",
        };
        assert_eq!(refused_on(Some("require"), None, &tcp), SSLROOTCERT);
        assert_eq!(refused_on(Some("verify-full"), None, &tcp), SSLROOTCERT);
        assert_eq!(refused_on(Some("allow"), None, &tcp), SSLMODE);
        assert_eq!(refused_on(Some("disable"), Some(SYSTEM), &tcp), SSLROOTCERT);
        assert_eq!(refused_on(Some("verify-ca"), Some(SYSTEM), &tcp), SSLMODE);
        assert_eq!(
            refused_on(Some("verify-full"), Some(SYSTEM), &tcp),
            "accepted"
        );
        assert_eq!(refused_on(None, Some(SYSTEM), &tcp), "accepted");
        let socket = [Host::Unix("/run/postgresql".into())];
        assert_eq!(
            refused_on(Some("verify-full"), Some(SYSTEM), &socket),
            SSLMODE
        );
        assert_eq!(
            refused_on(Some("verify-full"), Some("/nonexistent/ca.pem"), &tcp),
            SSLROOTCERT
        );
    }
}
