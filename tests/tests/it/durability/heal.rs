//! Issue #38 item 1: airlock heals from a full disk in every pattern, without a restart,
//! within 10 s of the space returning.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use airlock_tests::{curl, in_ci, loopback_policy, poll_until, text_origin, Airlock, Fixture};

use super::{fill, healthz, is_root, Tmpfs};

/// How long after space returns a staging must answer 202 again (issue #38).
const HEAL_WITHIN: Duration = Duration::from_secs(10);

/// One airlock on a 24 MiB tmpfs with no free-space floor, a run, and a loopback origin.
struct Full {
    fx: Fixture,
    _tmpfs: Tmpfs,
    airlock: Airlock,
    run: String,
    env: BTreeMap<String, String>,
    url: String,
    _origin: airlock_tests::Origin,
}

impl Full {
    /// `None` (the test skips) when not root outside CI.
    async fn start(size: &str) -> Option<Self> {
        if !is_root() {
            assert!(!in_ci(), "CI runs as root, which mounting a tmpfs needs");
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let fx = Fixture::new();
        let tmpfs = Tmpfs::mount(&fx.data_dir(), size);
        let origin = text_origin(None, 200, "ok").await;
        let (airlock, run, env) = fx
            .start_run(
                &loopback_policy(origin.addr().port()),
                &["--ledger-min-free-mib", "0"],
            )
            .await;
        let url = format!("http://127.0.0.1:{}/hook", origin.addr().port());
        Some(Self {
            fx,
            _tmpfs: tmpfs,
            airlock,
            run,
            env,
            url,
            _origin: origin,
        })
    }

    /// Stages the file at `body` (`curl --data-binary @body`); returns the status and body.
    async fn stage_file(&self, body: &std::path::Path) -> (u16, String) {
        let arg = format!("@{}", body.display());
        let out = curl(&self.env, &["-X", "POST", "--data-binary", &arg, &self.url]).await;
        (out.status, String::from_utf8_lossy(&out.body).into_owned())
    }

    async fn stage(&self, body: &str) -> (u16, String, Option<String>) {
        let out = curl(&self.env, &["-X", "POST", "--data", body, &self.url]).await;
        (
            out.status,
            String::from_utf8_lossy(&out.body).into_owned(),
            out.header("airlock-effect"),
        )
    }

    /// A body file of `len` bytes outside the tmpfs.
    fn body_file(&self, len: usize) -> std::path::PathBuf {
        let path = self.fx.dir.path().join(format!("body-{len}"));
        std::fs::write(&path, "y".repeat(len)).expect("body file");
        path
    }

    /// Stages until a staging answers 202, for up to [`HEAL_WITHIN`]; returns how long it
    /// took, or panics with airlock's health and log.
    async fn heals(&self, since: Instant) -> Duration {
        let healed = poll_until(HEAL_WITHIN, || async {
            let (status, _, effect) = self.stage("after-space-returned").await;
            (status == 202).then_some(effect)
        })
        .await;
        let took = since.elapsed();
        let (status, health) = healthz(&self.airlock.admin_url).await;
        assert!(
            healed.is_some(),
            "no 202 within {HEAL_WITHIN:?} of space returning; /healthz {status} {health}; log:\n{}",
            self.airlock.log()
        );
        eprintln!("heal_ms {}", took.as_millis());
        took
    }
}

/// Issue #38 item 1, the disk filled by another file: the large staging is refused
/// (507, room for its blob is checked before sled writes it) and answers at once, and
/// staging answers 202 again within [`HEAL_WITHIN`] of the space returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_filled_by_another_file_heals_after_a_large_staging_fails() {
    let Some(full) = Full::start("24m").await else {
        return;
    };
    let (status, body, _) = full.stage("before").await;
    assert_eq!(status, 202, "{body}");
    let large = full.body_file(266_000);
    // Another file takes all but ~64 KiB: the large staging's blob cannot be written.
    let filler = fill(&full.fx.data_dir());
    let len = std::fs::metadata(&filler).expect("filler").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .and_then(|f| f.set_len(len.saturating_sub(64 << 10)))
        .expect("leave 64 KiB");
    let (status, body) = full.stage_file(&large).await;
    assert_ne!(status, 202, "a 266 KB staging fit in 64 KiB: {body}");
    std::fs::remove_file(&filler).expect("free the space");
    full.heals(Instant::now()).await;
    let listed = full.airlock.effects(&full.run).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
}
