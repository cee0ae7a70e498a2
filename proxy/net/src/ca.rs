//! airlock's certificate authority: created on first start, and the leaf certificates it
//! mints for intercepted hosts (cached per host).
//!
//! Leaf shape follows what strict verifiers demand (docs/cases.md C14, CA/Browser Forum
//! Baseline Requirements §7.1): AKI, EKU serverAuth, a SAN (iPAddress for IP hosts, RFC 5280
//! §4.2.1.6; dNSName otherwise), validity under 200 days including the backdating.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// File name of the CA certificate inside the data directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key inside the data directory (mode 0600, never served).
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// How many hosts' leaf certificates are kept.
const LEAF_CACHE_CAPACITY: u64 = 10_000;
/// Leaf validity: 1 day backdated plus 90 days ahead.
const LEAF_BACKDATE: Duration = Duration::from_secs(24 * 3600);
const LEAF_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);

/// Errors creating, loading or using the CA.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// Reading or writing a CA file failed.
    #[error("cannot access {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A CA file does not hold what it should.
    #[error("{path} does not hold a usable CA ({reason})")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Minting a certificate failed.
    #[error("cannot mint a certificate for {host}: {reason}")]
    Mint {
        /// The host.
        host: String,
        /// What failed.
        reason: String,
    },
}

/// The CA: its certificate (PEM, as written to `ca.pem`) and the issuer that signs leaves.
pub struct CertificateAuthority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
    /// One key pair shared by every leaf: minting then costs one signature.
    leaf_key: KeyPair,
    /// The leaf key in rustls' form, shared by every leaf.
    signing_key: Arc<dyn rustls::sign::SigningKey>,
    /// Leaf certificate per host (about 1 KiB each).
    leaves: moka::sync::Cache<String, Arc<rustls::sign::CertifiedKey>>,
    /// Settings shared by every tunnel; each tunnel clones it with its host's leaf.
    base: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes `contents` to `path` readable by the owner only (0600 on Unix).
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

impl CertificateAuthority {
    /// Loads the CA from `dir` (`ca.pem`, `ca-key.pem`), creating an ECDSA P-256 CA there
    /// on first start.
    pub fn load_or_create(dir: &Path) -> Result<Self, CaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if !cert_path.exists() || !key_path.exists() {
            Self::create(&cert_path, &key_path)?;
        }
        let cert_pem = std::fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
        let key_pem = std::fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
        let invalid = |path: &Path, reason: String| CaError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let key = KeyPair::from_pem(&key_pem).map_err(|e| invalid(&key_path, e.to_string()))?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)
            .map_err(|e| invalid(&cert_path, e.to_string()))?;
        let leaf_key = KeyPair::generate().map_err(|e| CaError::Mint {
            host: "*".into(),
            reason: e.to_string(),
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let signing_key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                leaf_key.serialize_der(),
            )))
            .map_err(|e| CaError::Mint {
                host: "*".into(),
                reason: e.to_string(),
            })?;
        let mut base = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CaError::Mint {
                host: "*".into(),
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCertificate));
        base.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), b"http/1.0".to_vec()];
        let base = Arc::new(base);
        Ok(Self {
            cert_pem,
            issuer,
            leaf_key,
            leaves: moka::sync::Cache::new(LEAF_CACHE_CAPACITY),
            signing_key,
            base,
        })
    }

    fn create(cert_path: &Path, key_path: &Path) -> Result<(), CaError> {
        let mint_err = |e: rcgen::Error| CaError::Mint {
            host: "airlock CA".into(),
            reason: e.to_string(),
        };
        let key = KeyPair::generate().map_err(mint_err)?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "airlock egress CA");
        name.push(DnType::OrganizationName, "airlock");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(3650);
        let cert = params.self_signed(&key).map_err(mint_err)?;
        write_private_file(key_path, key.serialize_pem().as_bytes()).map_err(io_err(key_path))?;
        std::fs::write(cert_path, cert.pem()).map_err(io_err(cert_path))?;
        Ok(())
    }

    /// The CA certificate in PEM, as clients must trust it.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A TLS server configuration presenting a leaf certificate for `host` (a DNS name or an
    /// IP literal without brackets), minted on first use and cached (up to 10,000 hosts).
    /// ALPN offers `h2` and `http/1.1`.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let leaf = match self.leaves.get(host) {
            Some(leaf) => leaf,
            None => {
                let cert = self.leaf_certificate(host)?;
                let leaf = Arc::new(rustls::sign::CertifiedKey::new(
                    vec![cert.der().clone()],
                    self.signing_key.clone(),
                ));
                self.leaves.insert(host.to_owned(), leaf.clone());
                leaf
            }
        };
        let mut config = (*self.base).clone();
        config.cert_resolver = Arc::new(FixedLeaf(leaf));
        Ok(Arc::new(config))
    }

    /// Mints the leaf certificate for `host` with the shared leaf key.
    fn leaf_certificate(&self, host: &str) -> Result<rcgen::Certificate, CaError> {
        let mint_err = |reason: String| CaError::Mint {
            host: host.to_owned(),
            reason,
        };
        let mut params = CertificateParams::default();
        let san = match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.to_owned()
                    .try_into()
                    .map_err(|e: rcgen::Error| mint_err(e.to_string()))?,
            ),
        };
        params.subject_alt_names = vec![san];
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - LEAF_BACKDATE;
        params.not_after = now + LEAF_LIFETIME;
        let mut serial = [0u8; 16];
        rand::Rng::fill(&mut rand::thread_rng(), &mut serial);
        serial[0] &= 0x7f;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| mint_err(e.to_string()))
    }

    /// The PEM of a freshly minted leaf for `host`, as intercepted clients see it
    /// (for `airlock ca leaf` and `openssl verify`).
    pub fn mint_leaf_pem(&self, host: &str) -> Result<String, CaError> {
        Ok(self.leaf_certificate(host)?.pem())
    }
}

/// Presents one host's leaf whatever the SNI (the CONNECT target decides the host; a
/// mismatching SNI is refused per request with 421).
#[derive(Debug)]
struct FixedLeaf(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for FixedLeaf {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The base configuration's placeholder resolver; every tunnel replaces it.
#[derive(Debug)]
struct NoCertificate;

impl rustls::server::ResolvesServerCert for NoCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }
}
