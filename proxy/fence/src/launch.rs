//! Outside the fence: whether one can be made here ([`probe`]), the files it mounts and
//! its spec ([`Prepared::new`]), and the `unshare` command line that starts its PID 1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::trust::{self, TRUSTSTORE_PASSWORD};
use crate::{FenceError, Mount, Network, Report, Spec};

/// Why a fence cannot be made on this machine, naming what is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// Whether the process is root (no user namespace needed).
fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `unshare`'s namespace flags: network, mount and PID (a fresh `/proc`), plus a user
/// namespace mapping the caller to root when it is not root.
fn unshare_flags() -> Vec<&'static str> {
    let mut flags = vec![
        "--net",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ];
    if !is_root() {
        flags.extend(["--user", "--map-root-user"]);
    }
    flags
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Checks that a fence of `network` can be made here: `unshare` (util-linux), `ip`
/// (iproute2) and, for `isolated`, `nft` (nftables) are on `PATH`, and the kernel lets
/// this process create the namespaces (root, or unprivileged user namespaces).
///
/// # Errors
/// [`Unavailable`] naming the missing program or the kernel's refusal.
pub fn probe(network: Network) -> Result<(), Unavailable> {
    let mut needed = vec![("unshare", "util-linux"), ("ip", "iproute2")];
    if network == Network::Isolated {
        needed.push(("nft", "nftables"));
    }
    for (program, package) in needed {
        if !on_path(program) {
            return Err(Unavailable(format!(
                "`{program}` is not on PATH (install {package})"
            )));
        }
    }
    let output = Command::new("unshare")
        .args(unshare_flags())
        .arg("true")
        .output()
        .map_err(|e| Unavailable(format!("cannot run unshare: {e}")))?;
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        return Err(Unavailable(format!(
            "the kernel refused the namespaces ({why}); run as root, or enable unprivileged \
             user namespaces (kernel.unprivileged_userns_clone=1, \
             user.max_user_namespaces > 0)"
        )));
    }
    Ok(())
}

/// A fence ready to start: its files in a private directory, removed when dropped.
#[derive(Debug)]
pub struct Prepared {
    dir: tempfile::TempDir,
    spec: PathBuf,
    report: PathBuf,
    bundle: PathBuf,
    truststore: Option<PathBuf>,
}

/// What [`Prepared::new`] needs to know about the run and the command.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// `isolated` or `offline`.
    pub network: Network,
    /// airlock's fence socket.
    pub socket: &'a Path,
    /// The run and its token.
    pub run: &'a str,
    /// The run's proxy token.
    pub token: &'a str,
    /// The port of the proxy variables, re-served inside the fence.
    pub proxy_port: Option<u16>,
    /// airlock's CA certificate (PEM).
    pub ca_pem: &'a str,
    /// The command, its arguments and working directory.
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Its environment (the run's variables; CA variables are pointed at the bundle).
    pub env: BTreeMap<String, String>,
}

/// The variables that name a CA bundle; inside a fence each names the bundle.
const CA_VARS: [&str; 10] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "npm_config_cafile",
];

/// Variables that name a proxy; `offline` drops them (there is nowhere to go).
const PROXY_VARS: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
];

impl Prepared {
    /// Writes the fence's files: the CA bundle (system roots plus airlock's CA), the
    /// Java truststore, `resolv.conf` (airlock's DNS on `127.0.0.1`), `hosts`
    /// (`localhost` only) and the spec.
    ///
    /// # Errors
    /// [`FenceError`] when a file cannot be written or the truststore built.
    pub fn new(plan: Plan<'_>) -> Result<Self, FenceError> {
        let dir = tempfile::Builder::new()
            .prefix("airlock-fence-")
            .tempdir()
            .map_err(|source| FenceError::File {
                what: "fence directory",
                path: std::env::temp_dir().display().to_string(),
                source,
            })?;
        // Readable by the command whatever user it runs as (the files hold no secret).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
        }
        let (_, system) = trust::system_roots();
        let bundle_text = trust::bundle(&system, plan.ca_pem);
        let bundle = dir.path().join("ca-bundle.pem");
        trust::write(&bundle, bundle_text.as_bytes(), "CA bundle")?;
        let truststore = dir.path().join("truststore.p12");
        let truststore = match trust::java_truststore(&bundle_text) {
            Ok(bytes) => {
                trust::write(&truststore, &bytes, "Java truststore")?;
                Some(truststore)
            }
            Err(error) => {
                eprintln!("airlock: no Java truststore for the fence: {error}");
                None
            }
        };
        let resolv = dir.path().join("resolv.conf");
        let resolv_text = match plan.network {
            Network::Isolated => "# airlock's DNS (docs/containment.md)\nnameserver 127.0.0.1\noptions timeout:2 attempts:2\n",
            _ => "# --network offline: no resolver\n",
        };
        trust::write(&resolv, resolv_text.as_bytes(), "resolv.conf")?;
        let hosts = dir.path().join("hosts");
        trust::write(
            &hosts,
            b"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
            "hosts",
        )?;
        let mut mounts = vec![
            Mount {
                source: resolv,
                target: "/etc/resolv.conf".into(),
            },
            Mount {
                source: hosts,
                target: "/etc/hosts".into(),
            },
        ];
        for path in trust::SYSTEM_BUNDLES {
            // A bind mount needs its target to exist; a symlink is followed to its file.
            if Path::new(path).exists() {
                mounts.push(Mount {
                    source: bundle.clone(),
                    target: path.into(),
                });
            }
        }
        let mut env = plan.env;
        if plan.network == Network::Offline {
            for name in PROXY_VARS {
                env.remove(name);
            }
        }
        let bundle_path = bundle.display().to_string();
        for name in CA_VARS {
            env.insert(name.to_owned(), bundle_path.clone());
        }
        // Inside the fence Java's own connections are captured: no proxy settings, only
        // trust (the JDK reads neither http.proxyUser nor SSL_CERT_FILE).
        match &truststore {
            Some(path) => env.insert(
                "JAVA_TOOL_OPTIONS".into(),
                format!(
                    "-Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStorePassword={TRUSTSTORE_PASSWORD} -Djavax.net.ssl.trustStoreType=PKCS12",
                    path.display()
                ),
            ),
            None => env.remove("JAVA_TOOL_OPTIONS"),
        };
        let report = dir.path().join("report.json");
        let spec = Spec {
            network: plan.network,
            socket: plan.socket.to_owned(),
            run: plan.run.to_owned(),
            token: plan.token.to_owned(),
            proxy_port: (plan.network == Network::Isolated)
                .then_some(plan.proxy_port)
                .flatten(),
            program: plan.program.to_owned(),
            args: plan.args.to_vec(),
            cwd: plan.cwd.to_owned(),
            env,
            mounts,
            report: report.clone(),
        };
        let spec_path = dir.path().join("spec.json");
        let json = serde_json::to_vec_pretty(&spec).map_err(|source| FenceError::Json {
            what: "fence spec",
            source,
        })?;
        trust::write(&spec_path, &json, "fence spec")?;
        // The spec holds the run's token: only this user reads it.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&spec_path, std::fs::Permissions::from_mode(0o600));
        }
        Ok(Self {
            dir,
            spec: spec_path,
            report,
            bundle,
            truststore,
        })
    }

    /// `unshare` and its arguments, ending in `EXE fence-init SPEC` (`exe` is airlock's
    /// own binary).
    pub fn command_line(&self, exe: &Path) -> (String, Vec<String>) {
        let mut args: Vec<String> = unshare_flags().into_iter().map(str::to_owned).collect();
        args.push("--".into());
        args.push(exe.display().to_string());
        args.push("fence-init".into());
        args.push(self.spec.display().to_string());
        ("unshare".into(), args)
    }

    /// The CA bundle the fence mounts.
    pub fn bundle(&self) -> &Path {
        &self.bundle
    }

    /// The Java truststore, when one could be built.
    pub fn truststore(&self) -> Option<&Path> {
        self.truststore.as_deref()
    }

    /// The fence's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The report PID 1 wrote; `None` when it wrote none (it was killed, or never ran).
    pub fn report(&self) -> Option<Report> {
        let text = std::fs::read(&self.report).ok()?;
        serde_json::from_slice(&text).ok()
    }
}
