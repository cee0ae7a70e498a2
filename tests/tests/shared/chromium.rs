//! Headless Chromium driven over WebDriver (chromedriver, fantoccini), shared by the
//! `browser` and `chromium_proxy` test binaries (each declares `mod chromium;`). It is not
//! part of the support library, so the `it` binary does not link the WebDriver client.
//!
//! Needs Debian's `chromium` and `chromedriver` (package `chromium-driver`), and for a
//! trusted CA `certutil` (package `libnss3-tools`). Without them a test is skipped with a
//! message, except under CI (`CI` set), where it fails.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// The flags every session starts Chromium with; a test adds its own.
const HEADLESS: [&str; 5] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
];

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// The programs a Chromium test runs.
pub struct Tools {
    chromium: PathBuf,
    chromedriver: PathBuf,
    certutil: Option<PathBuf>,
}

impl Tools {
    /// Finds chromium and chromedriver on PATH, and certutil too when `certutil` is set
    /// (what [`Tools::open`] needs to trust a CA). When one is missing it prints that
    /// `test` is skipped and returns `None`; under CI it panics instead.
    ///
    /// It also installs ring as the process-wide rustls provider: fantoccini's rustls
    /// connector uses the process-wide provider; airlock uses ring.
    pub fn find(test: &str, certutil: bool) -> Option<Self> {
        let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"]);
        let chromedriver = on_path(&["chromedriver"]);
        let certutil_path = if certutil {
            on_path(&["certutil"]).map(Some)
        } else {
            Some(None)
        };
        let (Some(chromium), Some(chromedriver), Some(certutil)) =
            (chromium, chromedriver, certutil_path)
        else {
            let (missing, packages, apt) = if certutil {
                (
                    "chromium, chromedriver and certutil are not all on PATH",
                    "chromium, chromium-driver and libnss3-tools",
                    "chromium chromium-driver libnss3-tools",
                )
            } else {
                (
                    "chromium and chromedriver are not both on PATH",
                    "chromium and chromium-driver",
                    "chromium chromium-driver",
                )
            };
            assert!(
                !airlock_tests::in_ci(),
                "CI is set but {missing}: .ci/run installs the Debian packages {packages}"
            );
            println!("SKIPPED {test}: {missing} (apt-get install {apt})");
            return None;
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        Some(Self {
            chromium,
            chromedriver,
            certutil,
        })
    }

    /// Starts chromedriver on a free loopback port and opens a WebDriver session with a
    /// headless Chromium given `args` besides [`HEADLESS`]. With `trust`, Chromium runs
    /// with a throwaway `HOME` whose NSS database trusts that CA file as a root for TLS
    /// servers (Chromium on Linux reads `$HOME/.pki/nssdb`); this needs certutil (see
    /// [`Tools::find`]).
    ///
    /// Returns the client and the driver; dropping the driver kills chromedriver and the
    /// browsers it started.
    pub async fn open(&self, args: &[String], trust: Option<&Path>) -> (Client, Driver) {
        let home = trust.map(|ca_file| {
            let certutil = self
                .certutil
                .as_deref()
                .expect("Tools::find(_, true) for a trusted CA");
            let home = tempfile::tempdir().expect("home");
            nss_trust(certutil, home.path(), ca_file);
            home
        });
        let driver = start_driver(&self.chromedriver, home);
        let args: Vec<String> = HEADLESS
            .iter()
            .map(|arg| (*arg).to_owned())
            .chain(args.iter().cloned())
            .collect();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({"binary": self.chromium, "args": args}),
        );
        let client = ClientBuilder::rustls()
            .expect("rustls client")
            .capabilities(caps)
            .connect(&format!("http://{}", driver.addr))
            .await
            .expect("a WebDriver session");
        (client, driver)
    }
}

/// chromedriver, killed when dropped (with its throwaway `HOME`, if it has one).
pub struct Driver {
    child: Child,
    addr: SocketAddr,
    // Declared after `child`, so the directory goes after the browsers that use it.
    _home: Option<tempfile::TempDir>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver runs in its own process group with the browsers it starts: the
        // whole group goes, so a test that panics before closing its session leaves no
        // Chromium behind.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver on a free loopback port, with `home` (when given) as its (and so
/// Chromium's) `HOME`, and waits until it listens.
fn start_driver(chromedriver: &Path, home: Option<tempfile::TempDir>) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut command = Command::new(chromedriver);
    command
        .process_group(0)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(home) = &home {
        command.env("HOME", home.path());
    }
    let child = command.spawn().expect("chromedriver starts");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let driver = Driver {
        child,
        addr,
        _home: home,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

/// Creates `$home/.pki/nssdb` trusting `ca_file` as a root for TLS servers.
fn nss_trust(certutil: &Path, home: &Path, ca_file: &Path) {
    let db = home.join(".pki/nssdb");
    std::fs::create_dir_all(&db).expect("nssdb dir");
    let db_arg = format!("sql:{}", db.display());
    let run = |args: &[&str]| {
        let out = Command::new(certutil)
            .args(args)
            .output()
            .expect("certutil runs");
        assert!(
            out.status.success(),
            "certutil {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["-N", "-d", &db_arg, "--empty-password"]);
    let ca = ca_file.to_str().expect("utf-8 path");
    run(&["-A", "-d", &db_arg, "-n", "airlock", "-t", "C,,", "-i", ca]);
}
