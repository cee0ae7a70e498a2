//! The client that talks to origins: TLS verified against the webpki roots plus any
//! `--upstream-ca`, connections pooled and reused across requests and tunnels.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::body::ProxyBody;
use crate::dial::Dialer;

/// The pooled upstream client.
pub type UpstreamClient = Client<HttpsConnector<Dialer>, ProxyBody>;

/// Errors building the upstream client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The extra CA file could not be read.
    #[error("cannot read upstream CA file {path}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The extra CA file holds no usable certificate.
    #[error("upstream CA file {path} holds no usable certificate ({reason})")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// The TLS client configuration for origins: webpki roots plus the certificates in
/// `extra_ca` (PEM). Certificate verification cannot be turned off.
pub fn client_tls(extra_ca: Option<&Path>) -> Result<rustls::ClientConfig, UpstreamError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_ca {
        let shown = path.display().to_string();
        let pem = std::fs::read(path).map_err(|source| UpstreamError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| UpstreamError::Invalid {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
            roots.add(cert).map_err(|e| UpstreamError::Invalid {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(UpstreamError::Invalid {
                path: shown,
                reason: "no PEM CERTIFICATE block".into(),
            });
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| UpstreamError::Invalid {
        path: "<rustls>".into(),
        reason: e.to_string(),
    })?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Builds the pooled client over `dialer`.
pub fn client(dialer: Dialer, tls: rustls::ClientConfig) -> UpstreamClient {
    let connector = HttpsConnector::from((dialer, tls));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(64)
        .http1_max_headers(crate::headers::MAX_HEADERS)
        .http1_max_buf_size(crate::headers::MAX_HEADER_LIST_BYTES as usize)
        .http2_max_header_list_size(crate::headers::MAX_HEADER_LIST_BYTES)
        .build(connector)
}
