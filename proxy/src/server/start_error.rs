//! Errors starting the server, each naming the file or address at fault in the operator's terms.

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;

use crate::config::ServeConfig;

/// Errors starting the server; each names the file or address at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The data directory cannot be created or written.
    #[error("cannot use data directory {path}: {problem}")]
    DataDir {
        /// The directory or file.
        path: String,
        /// What is wrong with it, in the operator's terms (see [`data_problem`]).
        problem: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The policy file is invalid.
    #[error(transparent)]
    Policy(#[from] airlock_policy::PolicyError),
    /// The CA cannot be created or loaded.
    #[error(transparent)]
    Ca(#[from] airlock_net::ca::CaError),
    /// The run token key (`DATA/run-token.key`) cannot be read or created, or is not 64
    /// hex digits.
    #[error(transparent)]
    RunTokenKey {
        /// The cause, naming the file.
        #[from]
        source: airlock_ledger::TokenKeyError,
    },
    /// The ledger cannot be opened (another airlock may hold it).
    #[error("cannot open the ledger in {path} (is another airlock using this data directory?)")]
    Ledger {
        /// The ledger directory.
        path: String,
        /// The cause.
        #[source]
        source: airlock_ledger::LedgerError,
    },
    /// The PostgreSQL store of `--store` cannot be opened: a malformed URL, TLS asked
    /// for, an unreachable server, a refused login or a newer schema (the message names
    /// `USER@HOST:PORT/DATABASE`, never the password).
    #[error("--store: {source}")]
    Store {
        /// The cause.
        #[source]
        source: airlock_ledger::PgOpenError,
    },
    /// The PostgreSQL store opened but its first reads failed.
    #[error("the ledger {place} (--store) failed at start")]
    StoreRead {
        /// `postgres USER@HOST:PORT/DATABASE`.
        place: String,
        /// The cause.
        #[source]
        source: airlock_ledger::LedgerError,
    },
    /// A listener cannot bind.
    #[error("cannot listen on {}: {problem}", bind_named(.addr, .flag))]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The flag that sets it: `--listen`, `--admin`, `--transparent` or `--dns`.
        flag: &'static str,
        /// What is wrong, in the operator's terms (see [`bind_problem`]).
        problem: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The upstream TLS configuration is invalid.
    #[error(transparent)]
    Upstream(#[from] airlock_net::upstream::UpstreamError),
    /// A credential's value cannot be read from its source.
    #[error(transparent)]
    Credential(#[from] airlock_dataplane::credentials::CredentialError),
    /// A named token (`--reviewer-token` and the like) cannot be used.
    #[error(transparent)]
    Token(#[from] airlock_control::access::TokenError),
    /// The notification webhook is invalid.
    #[error(transparent)]
    Notify(#[from] airlock_control::notify::NotifyError),
    /// The policy cannot be loaded for another reason.
    #[error(transparent)]
    Load(airlock_dataplane::policy_store::LoadError),
}

pub(super) fn data_err(path: &Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |source| StartError::DataDir {
        path: path.display().to_string(),
        problem: data_problem(path, &source),
        source,
    }
}

/// What is wrong with the data path `path` that failed with `error`: a regular file where a
/// directory must be (named, with the path it blocks), a directory the user running
/// airlock may not write, a read-only file system; otherwise the system's message.
pub fn data_problem(path: &Path, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::AlreadyExists | ErrorKind::NotADirectory => {
            // The nearest existing ancestor (or the path itself) that is not a directory.
            match path
                .ancestors()
                .find(|p| p.exists() && !p.is_dir())
            {
                Some(file) if file == path => "it exists and is not a directory; pass --data a directory (or a path that does not exist yet)".to_owned(),
                Some(file) => format!(
                    "{} is a file, not a directory, so nothing can be created under it; pass --data another path",
                    file.display()
                ),
                None => error.to_string(),
            }
        }
        ErrorKind::PermissionDenied => format!(
            "permission denied: the user running airlock cannot create or write it; pass --data a directory it owns ({error})"
        ),
        ErrorKind::ReadOnlyFilesystem => {
            "the file system is read-only; pass --data a writable directory".to_owned()
        }
        _ => error.to_string(),
    }
}

/// How a bind error names `addr`: `the default proxy address 127.0.0.1:8080 (--listen)`
/// when it is the flag's default (the user may never have typed the flag), else
/// `ADDR (given by FLAG)`.
fn bind_named(addr: &SocketAddr, flag: &str) -> String {
    let defaults = ServeConfig::new(Default::default(), Default::default());
    match flag {
        "--listen" if *addr == defaults.listen => {
            format!("the default proxy address {addr} (--listen)")
        }
        "--admin" if *addr == defaults.admin => {
            format!("the default admin address {addr} (--admin)")
        }
        _ => format!("{addr} (given by {flag})"),
    }
}

/// Binds a TCP listener on `addr`, naming `flag` in the error.
pub(super) async fn bind(addr: SocketAddr, flag: &'static str) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| bind_err(addr, flag, source))
}

pub(super) fn bind_err(addr: SocketAddr, flag: &'static str, source: std::io::Error) -> StartError {
    StartError::Bind {
        addr,
        flag,
        problem: bind_problem(addr, flag, &source),
        source,
    }
}

/// What is wrong with binding `addr` (set by `flag`), in the operator's terms: a port
/// another process holds, an address not on this machine, a privileged port.
pub fn bind_problem(addr: SocketAddr, flag: &str, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::AddrInUse => format!(
            "port {} is already in use by another process (another airlock?); stop it or pass {flag} another address",
            addr.port()
        ),
        ErrorKind::AddrNotAvailable => format!(
            "{} is not an address of this machine; pass {flag} one of its addresses",
            addr.ip()
        ),
        ErrorKind::PermissionDenied => format!(
            "permission denied (ports below 1024 need privileges); pass {flag} a higher port"
        ),
        _ => error.to_string(),
    }
}

impl From<airlock_dataplane::policy_store::LoadError> for StartError {
    fn from(error: airlock_dataplane::policy_store::LoadError) -> Self {
        match error {
            airlock_dataplane::policy_store::LoadError::Policy(error) => StartError::Policy(error),
            airlock_dataplane::policy_store::LoadError::Credential(error) => {
                StartError::Credential(error)
            }
            other => StartError::Load(other),
        }
    }
}
