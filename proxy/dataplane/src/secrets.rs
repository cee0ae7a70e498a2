//! The credential store: the values of the policy's credentials, read from their sources
//! when a policy is loaded, and the key per-run placeholders are derived from. The policy
//! store holds one per policy; [`crate::credentials`] places the values on requests.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use airlock_ledger::RunId;
use airlock_policy::{Credential, CredentialSource, Policy};
use sha2::{Digest as _, Sha256};

/// Prefix of every credential placeholder.
pub const PLACEHOLDER_PREFIX: &str = "airlock-ph-";

/// Prefix of the environment variables that hand a run its placeholders.
pub const PLACEHOLDER_ENV_PREFIX: &str = "AIRLOCK_CREDENTIAL_";

/// A secret value. `Debug` and `Display` print `<redacted>`; only [`Secret::expose`] gives
/// the value, at the places that put it on a request.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A credential whose value cannot be read at start. Messages name the credential and
/// the source, never any value or command output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// The environment variable is not set (or not UTF-8).
    #[error("credential \"{name}\": environment variable {var} is not set (or not UTF-8) in airlock's environment")]
    EnvMissing {
        /// The credential.
        name: String,
        /// The variable.
        var: String,
    },
    /// The file cannot be read.
    #[error("credential \"{name}\": cannot read file {path}")]
    File {
        /// The credential.
        name: String,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The command cannot be started.
    #[error("credential \"{name}\": cannot run command {program}")]
    CommandSpawn {
        /// The credential.
        name: String,
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The command did not exit 0.
    #[error("credential \"{name}\": command {program} failed ({status})")]
    CommandFailed {
        /// The credential.
        name: String,
        /// The program.
        program: String,
        /// Its exit status.
        status: String,
    },
    /// The value is empty, not UTF-8, or holds control characters.
    #[error("credential \"{name}\": the value from {from} {problem}")]
    Invalid {
        /// The credential.
        name: String,
        /// The source, described.
        from: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The key placeholders are derived from cannot be read or created.
    #[error("cannot read or create the placeholder key {path}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The secret values of a policy's credentials, read once at start, and the key each
/// run's placeholders are derived from.
pub struct Credentials {
    pub(super) secrets: HashMap<String, Secret>,
    pub(super) placeholder_key: [u8; 32],
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("names", &self.secrets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Reads every credential of `policy` from its source (environment, file, or the
    /// standard output of a command, which this waits for), trailing newlines removed,
    /// and loads (or creates, mode 0600) the placeholder key in `data_dir`.
    ///
    /// Errors: the first credential whose value is missing, empty, not UTF-8 or holds
    /// control characters, and key file faults.
    pub fn resolve(policy: &Policy, data_dir: &Path) -> Result<Self, CredentialError> {
        let mut secrets = HashMap::new();
        for credential in policy.credentials() {
            secrets.insert(credential.name().to_owned(), read_secret(credential)?);
        }
        Ok(Self {
            secrets,
            placeholder_key: load_or_create_key(data_dir)?,
        })
    }

    /// The value of credential `name`, when the policy has it.
    pub fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets.get(name)
    }

    /// The run's placeholder for credential `name`: `airlock-ph-NAME-` and 32 hex digits
    /// of HMAC-like SHA-256 over a key kept in the data directory, the run and the name.
    /// Stable for a run across restarts; unrelated to the secret.
    pub fn placeholder(&self, run: &RunId, name: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.placeholder_key);
        hasher.update(run.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(name.as_bytes());
        let digest = hasher.finalize();
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("{PLACEHOLDER_PREFIX}{name}-{hex}")
    }

    /// `AIRLOCK_CREDENTIAL_<NAME>` = the run's placeholder, for every credential with
    /// `placeholder = true` (NAME upper-cased, `-` and `.` as `_`).
    pub fn placeholder_env(&self, policy: &Policy, run: &RunId) -> BTreeMap<String, String> {
        policy
            .credentials()
            .filter(|c| c.placeholder())
            .map(|c| (placeholder_var(c.name()), self.placeholder(run, c.name())))
            .collect()
    }
}

/// `AIRLOCK_CREDENTIAL_GH_BOT` for `gh-bot`.
pub fn placeholder_var(name: &str) -> String {
    let upper: String = name
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("{PLACEHOLDER_ENV_PREFIX}{upper}")
}

fn read_secret(credential: &Credential) -> Result<Secret, CredentialError> {
    let name = credential.name().to_owned();
    let raw: Vec<u8> = match credential.source() {
        CredentialSource::Env(var) => std::env::var(var)
            .map_err(|_| CredentialError::EnvMissing {
                name: name.clone(),
                var: var.clone(),
            })?
            .into_bytes(),
        CredentialSource::File(path) => {
            std::fs::read(path).map_err(|source| CredentialError::File {
                name: name.clone(),
                path: path.clone(),
                source,
            })?
        }
        CredentialSource::Command(argv) => {
            let program = argv.first().cloned().unwrap_or_default();
            let output = std::process::Command::new(&program)
                .args(&argv[1..])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::inherit())
                .output()
                .map_err(|source| CredentialError::CommandSpawn {
                    name: name.clone(),
                    program: program.clone(),
                    source,
                })?;
            if !output.status.success() {
                return Err(CredentialError::CommandFailed {
                    name,
                    program,
                    status: output.status.to_string(),
                });
            }
            output.stdout
        }
    };
    let invalid = |problem| CredentialError::Invalid {
        name: name.clone(),
        from: credential.source().to_string(),
        problem,
    };
    let text = String::from_utf8(raw).map_err(|_| invalid("is not UTF-8"))?;
    let value = text.trim_end_matches(['\n', '\r']).to_owned();
    if value.is_empty() {
        return Err(invalid("is empty"));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(
            "holds control characters; it cannot be placed on a request",
        ));
    }
    Ok(Secret(value))
}

fn load_or_create_key(data_dir: &Path) -> Result<[u8; 32], CredentialError> {
    let path = data_dir.join(airlock_net::config::PLACEHOLDER_KEY_FILE);
    let key_error = |source| CredentialError::Key {
        path: path.clone(),
        source,
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let bytes: Vec<u8> = (0..text.trim().len() / 2)
            .filter_map(|i| u8::from_str_radix(text.trim().get(2 * i..2 * i + 2)?, 16).ok())
            .collect();
        if let Ok(key) = <[u8; 32]>::try_from(bytes) {
            return Ok(key);
        }
    }
    use rand::RngCore;
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    airlock_net::ca::write_private_file(&path, format!("{hex}\n").as_bytes()).map_err(key_error)?;
    Ok(key)
}
