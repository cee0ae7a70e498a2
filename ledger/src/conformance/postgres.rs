//! A real PostgreSQL server for tests, and the conformance [`Backend`] over it.
//!
//! [`TestServer::start`] runs `initdb` and `pg_ctl` (found on `PATH` or under
//! `/usr/lib/postgresql/*/bin`) in a temporary directory, as the `postgres` user when the
//! test runs as root (`runuser -u postgres --`), listening on a free port of 127.0.0.1
//! only, its unix socket in the temporary directory, trust authentication. Each test takes
//! a fresh database ([`TestServer::database`]). Dropping the server stops it
//! (`pg_ctl stop -m immediate`) and removes its files.
//!
//! [`TestServer::start_tls`] starts one that speaks TLS only on TCP: a throwaway CA and a
//! leaf for `localhost` and `127.0.0.1` (rcgen) in the temporary directory, `ssl=on`, and a
//! `pg_hba.conf` whose TCP lines are all `hostssl` (a plain TCP connection is refused; the
//! harness itself creates databases over the unix socket); members of a role `scram`, when
//! a test creates it, log in by password (`scram-sha-256`), everyone else by trust.
//!
//! Without PostgreSQL installed, [`TestServer::start`] prints why and returns `None` so the
//! test can skip, unless the environment variable `CI` is set: then it panics.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::Backend;
use crate::{PgStore, Store};

/// Connections each store of the suite keeps.
const TEST_CONNECTIONS: usize = 4;

/// A PostgreSQL server of one test process (or one test).
#[derive(Debug)]
pub struct TestServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
    options: String,
    databases: AtomicU32,
    tls: Option<TlsFiles>,
}

/// The PEM files of a TLS test server.
#[derive(Debug)]
struct TlsFiles {
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A CA that signed nothing the server holds.
    other_ca: PathBuf,
}

/// The directory of PostgreSQL's server binaries: `initdb` on `PATH`, else the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn binaries() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Some(dir);
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

impl TestServer {
    /// Starts a server, or `None` (with a message on stderr) when PostgreSQL is not
    /// installed and `CI` is unset.
    ///
    /// Panics when PostgreSQL is missing under CI, or when the server cannot start.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// [`TestServer::start`] with extra server settings (`name=value`, given as `-c`).
    pub fn start_with(settings: &[&str]) -> Option<Self> {
        Self::start_inner(settings, false)
    }

    /// [`TestServer::start`] for a server that accepts TCP connections over TLS only
    /// ([`TestServer::url_of`] asks for `sslmode=verify-full` with [`TestServer::ca_file`]).
    ///
    /// Panics as [`TestServer::start`], and when the certificates cannot be made.
    pub fn start_tls() -> Option<Self> {
        Self::start_inner(&[], true)
    }

    fn start_inner(settings: &[&str], tls: bool) -> Option<Self> {
        let Some(bin) = binaries() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "PostgreSQL (initdb, pg_ctl) is not installed, and CI is set: .ci/run installs Debian's postgresql"
            );
            eprintln!("skipped: PostgreSQL (initdb, pg_ctl) is not installed");
            return None;
        };
        let as_postgres = rustix::process::geteuid().is_root();
        let dir = tempfile::Builder::new()
            .prefix("airlock-pg-")
            .tempdir()
            .expect("a temporary directory");
        let owner = as_postgres.then(|| {
            postgres_user().expect("a `postgres` user (Debian's postgresql package makes one)")
        });
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("chown the temporary directory");
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} -c max_connections=300",
            dir.path().display()
        );
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        let tls = tls.then(|| {
            let (files, cert, key) = write_tls(dir.path(), owner);
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                cert.display(),
                key.display()
            ));
            files
        });
        let server = Self {
            bin,
            dir,
            port,
            as_postgres,
            options,
            databases: AtomicU32::new(0),
            tls,
        };
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                path(&data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        if server.tls.is_some() {
            // Rewriting the file keeps its owner (postgres).
            std::fs::write(
                data.join("pg_hba.conf"),
                concat!(
                    "local all all trust\n",
                    // A password login, for SCRAM over TLS (its channel binding).
                    "hostssl all +scram 127.0.0.1/32 scram-sha-256\n",
                    "hostssl all all 127.0.0.1/32 trust\n",
                    "hostssl all all ::1/128 trust\n",
                ),
            )
            .expect("write pg_hba.conf");
        }
        server.restart();
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of database `name` (which need not exist): `sslmode=disable`, or for a TLS
    /// server `sslmode=verify-full` against [`TestServer::ca_file`].
    pub fn url_of(&self, name: &str) -> String {
        match &self.tls {
            None => format!(
                "postgres://postgres@127.0.0.1:{}/{name}?sslmode=disable",
                self.port
            ),
            Some(files) => format!(
                "postgres://postgres@127.0.0.1:{}/{name}?sslmode=verify-full&sslrootcert={}",
                self.port,
                files.ca.display()
            ),
        }
    }

    /// The CA certificate (PEM file) that signed a TLS server's certificate.
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|files| files.ca.as_path())
    }

    /// A CA certificate (PEM file) that signed nothing of a TLS server's.
    pub fn other_ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|files| files.other_ca.as_path())
    }

    /// A URL of the `postgres` database for the harness itself: over the unix socket for a
    /// TLS server (which refuses plain TCP).
    fn admin_url(&self) -> String {
        match &self.tls {
            None => self.url_of("postgres"),
            Some(_) => format!(
                "host={} port={} user=postgres dbname=postgres",
                self.dir.path().display(),
                self.port
            ),
        }
    }

    /// Creates a fresh database and returns its URL.
    ///
    /// Panics when the server refuses.
    pub fn database(&self) -> String {
        let n = self.databases.fetch_add(1, Ordering::SeqCst);
        let name = format!("airlock_{}_{n}", std::process::id());
        self.execute(&format!("CREATE DATABASE {name}"));
        self.url_of(&name)
    }

    /// Runs `sql` (statements without parameters) as the superuser on database
    /// `postgres`.
    ///
    /// Panics when the server refuses.
    pub fn execute(&self, sql: &str) {
        let admin = self.admin_url();
        let sql = sql.to_owned();
        // The sync client must not run inside a caller's async runtime: its own thread.
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&admin, postgres::NoTls)
                .expect("connect to the test PostgreSQL");
            client
                .batch_execute(&sql)
                .unwrap_or_else(|e| panic!("the test PostgreSQL refuses {sql}: {e:?}"));
        })
        .join()
        .expect("the database thread");
    }

    /// Runs one of the server's binaries (as `postgres` when root), panicking on failure.
    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        assert!(
            output.status.success(),
            "{tool} failed: {}\n{}\n{}\nserver log:\n{log}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Stops the server now (`-m fast`), to test connection loss; [`TestServer::restart`]
    /// starts it again on the same port.
    pub fn stop(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", path(&data), "-m", "fast", "-w", "stop"]);
    }

    /// Starts the (stopped) server, on its port and data.
    pub fn restart(&self) {
        let data = self.data();
        let log = self.dir.path().join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                path(&data),
                "-l",
                path(&log),
                "-o",
                &self.options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let data = self.data();
        let program = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let _ = command
            .args(["-D", path(&data), "-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// Writes a CA, a second CA and a server leaf for `localhost` and `127.0.0.1` (ECDSA P-256)
/// into `dir`, the key readable by `owner` only: the files, the leaf and its key.
///
/// Panics when rcgen or the file system fails.
fn write_tls(dir: &Path, owner: Option<(u32, u32)>) -> (TlsFiles, PathBuf, PathBuf) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    use std::os::unix::fs::PermissionsExt;
    let ca = |name: &str| {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("a CA certificate");
        (cert.pem(), Issuer::new(params, key))
    };
    let (ca_pem, issuer) = ca("airlock test PostgreSQL CA");
    let (other_pem, _) = ca("airlock test unrelated CA");
    let key = KeyPair::generate().expect("a server key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server names");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.use_authority_key_identifier_extension = true;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = params
        .signed_by(&key, &issuer)
        .expect("a server certificate");
    let files = TlsFiles {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
    };
    let (cert, key_file) = (dir.join("server.crt"), dir.join("server.key"));
    for (file, text) in [
        (&files.ca, ca_pem),
        (&files.other_ca, other_pem),
        (&cert, leaf.pem()),
        (&key_file, key.serialize_pem()),
    ] {
        std::fs::write(file, text).expect("write a TLS file");
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(file, Some(uid), Some(gid)).expect("chown a TLS file");
        }
    }
    // PostgreSQL refuses a key that others can read.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))
        .expect("chmod the server key");
    (files, cert, key_file)
}

/// The uid and gid of the `postgres` user, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"postgres") && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// The PostgreSQL backend: each fresh store on a new database of one server; reopening
/// connects a new store to the same database.
#[derive(Debug)]
pub struct PgBackend {
    server: Arc<TestServer>,
    url: Option<String>,
}

impl PgBackend {
    /// A backend over `server`.
    pub fn new(server: Arc<TestServer>) -> Self {
        Self { server, url: None }
    }

    /// The URL of the last fresh store's database.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }
}

impl Backend for PgBackend {
    fn fresh(&mut self) -> Box<dyn Store> {
        let url = self.server.database();
        let store = PgStore::open(&url, TEST_CONNECTIONS).expect("open a PostgreSQL store");
        self.url = Some(url);
        Box::new(store)
    }

    fn reopen(&mut self) -> Box<dyn Store> {
        let url = self.url.as_ref().expect("reopen after fresh");
        Box::new(PgStore::open(url, TEST_CONNECTIONS).expect("reopen the PostgreSQL store"))
    }
}
