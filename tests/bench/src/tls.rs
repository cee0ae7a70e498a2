//! The throwaway CA, the origin's certificate and the load generator's trust store.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::BoxError;

/// A CA made for this run only, and what it signs.
pub struct ThrowawayCa {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    /// The CA key, PEM (hudsucker signs its leaves with it).
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl ThrowawayCa {
    /// A fresh ECDSA P-256 CA.
    pub fn new(name: &str) -> Result<Self, BoxError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A server certificate and key (PEM) for `127.0.0.1` (iPAddress SAN), `localhost` and
    /// the fence section's `origin.test`.
    pub fn origin_leaf(&self) -> Result<(String, String), BoxError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        params.subject_alt_names = vec![
            SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])),
            SanType::DnsName("localhost".try_into()?),
            SanType::DnsName(crate::fence::ORIGIN_NAME.try_into()?),
        ];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The ring provider, which airlock uses too: every contestant does the same crypto.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client configuration trusting every PEM certificate in `roots` (ALPN http/1.1).
pub fn client_config(roots: &[String]) -> Result<Arc<rustls::ClientConfig>, BoxError> {
    let mut store = rustls::RootCertStore::empty();
    for pem in roots {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            store.add(cert?)?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A server configuration from PEM files (ALPN http/1.1).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, BoxError> {
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
