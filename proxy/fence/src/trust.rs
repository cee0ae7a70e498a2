//! Trust inside a fence: a CA bundle of the system roots plus airlock's CA, mounted over
//! the system bundle paths, and the same set as a PKCS12 Java truststore.

use std::path::{Path, PathBuf};

use crate::FenceError;

/// Where distributions keep the system CA bundle; each that exists is covered inside the
/// fence (Debian/Ubuntu, RHEL/Fedora, RHEL's extracted bundle, Alpine/macOS-style).
pub const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Password of the Java truststore (the JDK's own default, `changeit`; a truststore holds
/// no secret).
pub const TRUSTSTORE_PASSWORD: &str = "changeit";

/// The first system bundle that exists and its text; empty when none does.
pub fn system_roots() -> (Option<PathBuf>, String) {
    for path in SYSTEM_BUNDLES {
        if let Ok(text) = std::fs::read_to_string(path) {
            return (Some(PathBuf::from(path)), text);
        }
    }
    (None, String::new())
}

/// The bundle's text: the system roots, then airlock's CA.
pub fn bundle(system: &str, ca_pem: &str) -> String {
    let mut out = String::with_capacity(system.len() + ca_pem.len() + 64);
    out.push_str(system);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("# airlock's CA: every intercepted connection is served with a leaf it signed\n");
    out.push_str(ca_pem);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// A PKCS12 truststore (password [`TRUSTSTORE_PASSWORD`]) trusting every certificate of
/// `pem`, as the JDK reads one: each entry is a trusted certificate with the JDK's
/// trusted-key-usage attribute (`javax.net.ssl.trustStoreType=PKCS12`).
///
/// # Errors
/// [`FenceError::Truststore`] when `pem` holds no certificate or one does not parse.
pub fn java_truststore(pem: &str) -> Result<Vec<u8>, FenceError> {
    let mut store = p12_keystore::KeyStore::new();
    let mut reader = std::io::BufReader::new(pem.as_bytes());
    let mut count = 0usize;
    for cert in rustls_pemfile::certs(&mut reader) {
        let cert = cert.map_err(|e| FenceError::Truststore(e.to_string()))?;
        let Ok(cert) = p12_keystore::Certificate::from_der(cert.as_ref()) else {
            // A root the parser cannot read is left out rather than failing the fence.
            continue;
        };
        count += 1;
        store.add_entry(
            &format!("cert{count}"),
            p12_keystore::KeyStoreEntry::Certificate(cert),
        );
    }
    if count == 0 {
        return Err(FenceError::Truststore("no certificate to trust".into()));
    }
    // One iteration each: the password is public and the store holds no secret, so key
    // stretching would only cost time (10,000 by default: most of a second in debug).
    store
        .writer(TRUSTSTORE_PASSWORD)
        .encryption_iterations(1)
        .mac_iterations(1)
        .write()
        .map_err(|e| FenceError::Truststore(e.to_string()))
}

/// Writes `contents` to `path` (mode 0644: the fenced command reads it as any user),
/// through a temporary file renamed over it, so a reader never sees half a file.
///
/// # Errors
/// [`FenceError::File`] naming `what`.
pub fn write(path: &Path, contents: &[u8], what: &'static str) -> Result<(), FenceError> {
    let error = |source| FenceError::File {
        what,
        path: path.display().to_string(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    std::fs::write(&temporary, contents).map_err(error)?;
    std::fs::rename(&temporary, path).map_err(error)
}
