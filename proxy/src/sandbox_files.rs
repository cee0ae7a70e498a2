//! Files in the data directory for sandbox clients that read none of the CA variables
//! (docs/containment.md, "env mode"): the Java truststore (`JAVA_TOOL_OPTIONS`), a PEM
//! bundle of the system roots and airlock's CA (`npm_config_cafile`), and a wgetrc
//! (`WGETRC`). Written when the server starts, and only when the sandbox reaches the data
//! directory's CA (no `--advertise-ca`): behind it these paths are not where the
//! sandbox is.

use std::path::{Path, PathBuf};

use airlock_control::env::{wgetrc_text, Advertised};
use airlock_net::config::{CA_BUNDLE_FILE, JAVA_TRUSTSTORE_FILE, WGETRC_FILE};
use tracing::warn;

/// Writes the files and names each that exists in `advertised`. The bundle and the wgetrc
/// are small and written at once; the truststore on a background thread. A failure is
/// logged, and the variable naming that file is then left out (npm falls back to
/// `ca.pem` alone).
pub(crate) fn write(data_dir: &Path, ca_pem: &str, advertised: &mut Advertised) {
    let (_, system) = airlock_fence::trust::system_roots();
    let bundle_text = airlock_fence::trust::bundle(&system, ca_pem);
    let bundle = data_dir.join(CA_BUNDLE_FILE);
    match airlock_fence::trust::write(&bundle, bundle_text.as_bytes(), "CA bundle") {
        Ok(()) => advertised.ca_bundle = Some(bundle),
        Err(error) => warn!(error = %error, "no CA bundle for npm_config_cafile"),
    }
    let wgetrc = data_dir.join(WGETRC_FILE);
    let text = wgetrc_text(&advertised.ca_file);
    match airlock_fence::trust::write(&wgetrc, text.as_bytes(), "wgetrc") {
        Ok(()) => advertised.wgetrc = Some(wgetrc),
        Err(error) => warn!(error = %error, "no wgetrc; wget will not trust airlock's CA"),
    }
    advertised.truststore = write_truststore(data_dir, bundle_text);
}

/// `DATA/java-truststore.p12`: the system roots and airlock's CA as a PKCS12 truststore
/// for the JDK (which reads none of the CA variables). Written on a background thread
/// unless it is newer than `ca.pem` (building it costs ~100 ms of CPU unoptimised); a
/// failure is logged, and Java clients then do not trust airlock's CA.
fn write_truststore(data_dir: &Path, bundle: String) -> Option<PathBuf> {
    let path = data_dir.join(JAVA_TRUSTSTORE_FILE);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let ca = data_dir.join(airlock_net::ca::CA_CERT_FILE);
    if let (Some(store), Some(ca)) = (modified(&path), modified(&ca)) {
        if store >= ca {
            return Some(path);
        }
    }
    let target = path.clone();
    std::thread::spawn(move || {
        let written = airlock_fence::trust::java_truststore(&bundle)
            .and_then(|bytes| airlock_fence::trust::write(&target, &bytes, "Java truststore"));
        if let Err(error) = written {
            warn!(error = %error, "no Java truststore; Java clients will not trust airlock's CA");
        }
    });
    Some(path)
}
