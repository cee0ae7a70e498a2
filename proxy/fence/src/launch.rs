//! Outside the fence: whether one can be made here ([`probe`]), the files it mounts and
//! its spec ([`Prepared::new`]), and the `unshare` command line that starts its PID 1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_net::config::{CA_VARS, PROXY_VARS};

use crate::trust::{self, TRUSTSTORE_PASSWORD};
use crate::{FenceError, Mount, Network, Report, Spec};

pub use crate::host::{is_root, tool};
pub(crate) use crate::host::{mapped_flags, UNSHARE_FLAGS};
pub use crate::probe::{probe, Checks, Unavailable};

/// Directories of host services a fenced command could ask to act for it outside the
/// fence (start a process, resolve a name, drive a display): each that exists is covered
/// with an empty tmpfs inside the fence.
const HIDDEN_DIRS: [&str; 8] = [
    "/tmp/.X11-unix",
    "/run/systemd",
    "/run/dbus",
    "/run/user",
    "/run/nscd",
    "/var/run/nscd",
    "/run/containerd",
    "/run/docker",
];

/// Service sockets that are files: each that exists is covered with `/dev/null`.
const HIDDEN_FILES: [&str; 3] = [
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/podman/podman.sock",
];

/// Variables the fence never passes to the command: airlock's own credentials and
/// addresses, which a user may have exported where `airlock run` was started, and the
/// fence's spec.
pub const SCRUBBED_VARS: [&str; 4] = ["AIRLOCK_TOKEN", "AIRLOCK_ADMIN", "AIRLOCK_DATA", SPEC_VAR];

/// The variable that carries the spec (JSON) to the fence's PID 1.
pub const SPEC_VAR: &str = "AIRLOCK_FENCE_SPEC";

/// A fence ready to start: its files in a directory of its own, removed when dropped.
/// `public/` holds what the command reads (CA bundle, truststore, resolver files);
/// `private/` holds the spec (with the run's token) and the report, and is hidden from
/// the command once PID 1 has read the one and opened the other.
#[derive(Debug)]
pub struct Prepared {
    dir: tempfile::TempDir,
    spec: String,
    report_file: std::fs::File,
    bundle: PathBuf,
    truststore: Option<PathBuf>,
    root: bool,
}

/// What [`Prepared::new`] needs to know about the run and the command.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// `isolated` or `offline`.
    pub network: Network,
    /// airlock's fence socket (in its data directory, which the fence hides).
    pub socket: &'a Path,
    /// The run.
    pub run: &'a str,
    /// The run's proxy token.
    pub token: &'a str,
    /// The port of the proxy variables, re-served inside the fence on `127.0.0.1`.
    pub proxy_port: Option<u16>,
    /// airlock's CA certificate (PEM).
    pub ca_pem: &'a str,
    /// A truststore already built for this CA (the server's), used instead of a new one.
    pub truststore: Option<&'a Path>,
    /// The command.
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Its environment (the run's variables; CA and proxy variables are rewritten for
    /// the fence).
    pub env: BTreeMap<String, String>,
    /// The run's layer (a directory only its owner can enter): an overlay over every
    /// writable filesystem keeps what the command writes outside the workspace there
    /// ([`crate::root`]); under root the command also runs as the subordinate range.
    /// `None` with `--allow-host-root`.
    pub layer: Option<&'a Path>,
}

/// The variables that name a CA bundle ([`CA_VARS`]) and npm's, which replaces npm's
/// trust rather than adding to it: inside a fence each names the bundle, which holds the
/// system roots too.
const FENCE_CA_VARS: [&str; 1] = ["npm_config_cafile"];

fn private_dir(dir: &Path, name: &str, mode: u32) -> Result<PathBuf, FenceError> {
    let path = dir.join(name);
    std::fs::create_dir(&path).map_err(|source| FenceError::File {
        what: "fence directory",
        path: path.display().to_string(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
    }
    Ok(path)
}

/// `/etc/nsswitch.conf` with `hosts: files dns`: a host that resolves through
/// systemd-resolved or nscd (over their sockets) would otherwise bypass airlock's DNS.
fn nsswitch() -> String {
    let host = std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default();
    let mut out: Vec<String> = host
        .lines()
        .filter(|line| !line.trim_start().starts_with("hosts:"))
        .map(str::to_owned)
        .collect();
    out.push("hosts: files dns".to_owned());
    out.join("\n") + "\n"
}

impl Prepared {
    /// Writes the fence's files: the CA bundle (system roots plus airlock's CA), the
    /// Java truststore, `resolv.conf` (airlock's DNS on `127.0.0.1`), `hosts`
    /// (`localhost` only), `nsswitch.conf` and the spec.
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
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
        }
        let public = private_dir(dir.path(), "public", 0o755)?;
        let private = private_dir(dir.path(), "private", 0o700)?;
        let (_, system) = trust::system_roots();
        let bundle_text = trust::bundle(&system, plan.ca_pem);
        let bundle = public.join("ca-bundle.pem");
        trust::write(&bundle, bundle_text.as_bytes(), "CA bundle")?;
        // wget reads none of the CA variables, only its startup file (`WGETRC`); the
        // server's wgetrc names a data-directory path the fence hides.
        let wgetrc = public.join("wgetrc");
        let wgetrc_text = format!(
            "ca_certificate = {}\ncontent_on_error = on\n",
            bundle.display()
        );
        trust::write(&wgetrc, wgetrc_text.as_bytes(), "wgetrc")?;
        let truststore = match plan.truststore.filter(|p| p.is_file()) {
            Some(existing) => {
                let copy = public.join("truststore.p12");
                std::fs::copy(existing, &copy)
                    .map(|_| copy)
                    .map_err(|error| {
                        eprintln!(
                            "airlock: WARNING: cannot copy the Java truststore {}: {error}; Java in the fence will not trust airlock's CA",
                            existing.display()
                        )
                    })
                    .ok()
            }
            None => {
                let path = public.join("truststore.p12");
                trust::java_truststore(&bundle_text)
                    .and_then(|bytes| trust::write(&path, &bytes, "Java truststore"))
                    .map(|()| path)
                    .map_err(|error| {
                        eprintln!("airlock: no Java truststore for the fence: {error}")
                    })
                    .ok()
            }
        };
        let resolv = public.join("resolv.conf");
        let resolv_text = match plan.network {
            Network::Isolated => "# airlock's DNS (docs/containment.md)\nnameserver 127.0.0.1\noptions timeout:2 attempts:2\n",
            _ => "# --network offline: no resolver\n",
        };
        trust::write(&resolv, resolv_text.as_bytes(), "resolv.conf")?;
        let hosts = public.join("hosts");
        trust::write(
            &hosts,
            b"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
            "hosts",
        )?;
        let nsswitch_file = public.join("nsswitch.conf");
        trust::write(&nsswitch_file, nsswitch().as_bytes(), "nsswitch.conf")?;
        let mut mounts = Vec::new();
        for (source, target) in [
            (resolv, "/etc/resolv.conf"),
            (hosts, "/etc/hosts"),
            (nsswitch_file, "/etc/nsswitch.conf"),
        ] {
            // A bind mount needs its target to exist; a symlink is followed to its file.
            if Path::new(target).exists() {
                mounts.push(Mount {
                    source,
                    target: target.into(),
                });
            }
        }
        for path in trust::SYSTEM_BUNDLES {
            if Path::new(path).exists() {
                mounts.push(Mount {
                    source: bundle.clone(),
                    target: path.into(),
                });
            }
        }
        let mut hide: Vec<PathBuf> = Vec::new();
        let mut socket = PathBuf::new();
        if plan.network == Network::Isolated {
            // The socket is mounted into the public directory, so the data directory
            // that holds it (ledger, admin token, CA key) can be hidden.
            let inside = public.join("fence.sock");
            trust::write(&inside, b"", "fence socket mount point")?;
            mounts.push(Mount {
                source: plan.socket.to_owned(),
                target: inside.clone(),
            });
            socket = inside;
        }
        if let Some(data) = plan.socket.parent().filter(|d| d.parent().is_some()) {
            if plan.cwd.starts_with(data) {
                eprintln!(
                    "airlock: WARNING: the workspace is inside airlock's data directory {}, \
                     so the fence cannot hide the ledger from the command",
                    data.display()
                );
            } else {
                hide.push(data.to_owned());
            }
        }
        hide.push(private.clone());
        for path in HIDDEN_DIRS {
            if let Ok(real) = std::fs::canonicalize(path) {
                if real.is_dir() && !hide.contains(&real) {
                    hide.push(real);
                }
            }
        }
        let mut hide_files: Vec<PathBuf> = Vec::new();
        for path in HIDDEN_FILES {
            if let Ok(real) = std::fs::canonicalize(path) {
                if !hide_files.contains(&real) && !hide.iter().any(|d| real.starts_with(d)) {
                    hide_files.push(real);
                }
            }
        }
        // The relay's own ports inside the fence: a proxy port equal to one is not re-served.
        let proxy_port = plan
            .proxy_port
            .filter(|port| ![crate::RELAY_PORT, crate::DNS_PORT].contains(port));
        if plan.proxy_port.is_some() && proxy_port.is_none() {
            eprintln!(
                "airlock: WARNING: the proxy's port {} is one the fence's relay uses; the proxy variables do not work inside the fence (captured connections do)",
                plan.proxy_port.unwrap_or_default()
            );
        }
        let mut env = plan.env;
        for name in PROXY_VARS {
            if plan.network == Network::Isolated && env.contains_key(name) {
                // Inside the fence the proxy is the relay's port on loopback, whatever
                // address the server advertises outside.
                if let Some(port) = proxy_port {
                    env.insert(
                        name.to_owned(),
                        format!("http://{}:{}@127.0.0.1:{port}", plan.run, plan.token),
                    );
                }
            } else {
                env.remove(name);
            }
        }
        let bundle_path = bundle.display().to_string();
        for name in CA_VARS.iter().chain(&FENCE_CA_VARS) {
            env.insert((*name).to_owned(), bundle_path.clone());
        }
        env.insert("WGETRC".into(), wgetrc.display().to_string());
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
        let report = private.join("report.json");
        let isolated = plan.network == Network::Isolated;
        let spec = Spec {
            network: plan.network,
            socket,
            run: if isolated {
                plan.run.to_owned()
            } else {
                String::new()
            },
            token: if isolated {
                plan.token.to_owned()
            } else {
                String::new()
            },
            proxy_port: isolated.then_some(proxy_port).flatten(),
            program: plan.program.to_owned(),
            args: plan.args.to_vec(),
            cwd: plan.cwd.to_owned(),
            env,
            mounts,
            hide,
            hide_files,
            report: report.clone(),
            root: plan.layer.map(|layer| crate::root::RootSpec {
                uids: crate::idmap::subordinate(Path::new("/etc/subuid")),
                gids: crate::idmap::subordinate(Path::new("/etc/subgid")),
                layer: layer.to_owned(),
                workspace: plan.cwd.to_owned(),
                pass: std::iter::once(dir.path().to_owned())
                    .chain((plan.network == Network::Isolated).then(|| plan.socket.to_owned()))
                    .collect(),
                new_root: dir.path().join("root"),
                shift: is_root(),
            }),
        };
        // The spec holds the run's token: it goes to PID 1 in its environment, never in a
        // file another fenced command of this user could read.
        let root = spec.root.as_ref().is_some_and(|r| r.shift);
        let spec = serde_json::to_string(&spec).map_err(|source| FenceError::Json {
            what: "fence spec",
            source,
        })?;
        // Read back through this handle, opened before the command exists: whatever the
        // command does to the paths, it cannot replace the file PID 1 writes.
        let report_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&report)
            .map_err(|source| FenceError::File {
                what: "fence report",
                path: report.display().to_string(),
                source,
            })?;
        Ok(Self {
            dir,
            spec,
            report_file,
            bundle,
            truststore,
            root,
        })
    }

    /// `unshare` (by absolute path) and its arguments, ending in `EXE fence-init` (`exe`
    /// is airlock's own binary), and the environment to add: [`SPEC_VAR`] holds the spec.
    ///
    /// Under root (a layer was given) it is `unshare --mount --propagation private -- EXE
    /// fence-root -- UNSHARE FLAGS -- EXE fence-init`, with no `--map-root-user`:
    /// `fence-root` builds root's view and maps the fence ([`crate::root`]).
    pub fn command_line(&self, exe: &Path) -> (String, Vec<String>, Vec<(String, String)>) {
        let unshare = tool("unshare").display().to_string();
        let env = vec![(SPEC_VAR.to_owned(), self.spec.clone())];
        let fence_init = [
            "--".to_owned(),
            exe.display().to_string(),
            "fence-init".to_owned(),
        ];
        if !self.root {
            let mut args = mapped_flags();
            args.extend(fence_init);
            return (unshare, args, env);
        }
        let mut args: Vec<String> = ["--mount", "--propagation", "private", "--"]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        args.extend([
            exe.display().to_string(),
            "fence-root".to_owned(),
            "--".to_owned(),
            unshare.clone(),
        ]);
        args.extend(UNSHARE_FLAGS.iter().map(|f| (*f).to_owned()));
        args.extend(fence_init);
        (unshare, args, env)
    }

    /// The CA bundle the fence mounts.
    pub fn bundle(&self) -> &Path {
        &self.bundle
    }

    /// The Java truststore, when there is one.
    pub fn truststore(&self) -> Option<&Path> {
        self.truststore.as_deref()
    }

    /// The fence's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The report PID 1 wrote; `None` when it wrote none (it was killed, or never ran).
    pub fn report(&self) -> Option<Report> {
        use std::io::{Read as _, Seek as _};
        let mut file = self.report_file.try_clone().ok()?;
        file.rewind().ok()?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).ok()?;
        serde_json::from_slice(&text).ok()
    }
}
