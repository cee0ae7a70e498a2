//! Retention (issue 19 item 5): `airlock runs export` holds a run's whole record as
//! NDJSON, `airlock runs prune` removes finished runs (exported first with `--export-to`)
//! and nothing of other runs, `airlock serve --retain` prunes periodically, and `GET
//! /v1/runs` is paged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use airlock_tests::{curl, eventually, loopback_policy, ok_origin, Fixture};
use serde_json::Value;

use crate::cli::cli;

/// The lines of an NDJSON export, parsed.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read export")
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

fn count_kinds(lines: &[Value]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in lines {
        *counts
            .entry(line["kind"].as_str().expect("kind").to_owned())
            .or_insert(0) += 1;
    }
    counts
}

/// Makes two reads, a denied request and two POSTs through `env`; the first POST's body
/// is `shared`.
async fn traffic(env: &BTreeMap<String, String>, base: &str, tag: &str, shared: &str) {
    for path in ["/r/1", "/r/2"] {
        let read = curl(env, &[&format!("{base}{path}?{tag}")]).await;
        assert_eq!(read.status, 200, "{}", read.stderr);
    }
    // A host:port no rule allows: the CONNECT is refused and journaled as a denial.
    let denied = curl(env, &["https://127.0.0.1:9/denied"]).await;
    assert!(!denied.success || denied.status == 403, "{}", denied.stderr);
    for body in [shared.to_owned(), format!("{{\"only\":\"{tag}\"}}")] {
        let staged = curl(
            env,
            &["-X", "POST", "--data", &body, &format!("{base}/hook")],
        )
        .await;
        assert_eq!(staged.status, 202, "{}", staged.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_holds_every_record_and_prune_removes_only_the_finished_run() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let mut airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let shared = r#"{"same":"body in both runs"}"#;
    let (a, env_a) = airlock.create_run().await;
    let (b, env_b) = airlock.create_run().await;
    traffic(&env_a, &base, "a", shared).await;
    traffic(&env_b, &base, "b", shared).await;
    let report = airlock.commit_pending(&a).await;
    assert_eq!(report["state"], "committed", "{report}");
    let posts = origin
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(
        posts, 2,
        "the origin received run A's effects, and only those"
    );

    // What the admin API lists of A, to count the export's lines against.
    let effects_a = airlock.effects(&a).await;
    let reads_a = airlock.reads(&a).await.expect("reads");
    let denials_a = airlock
        .admin
        .get(&format!("/v1/runs/{a}/denials"))
        .await
        .expect("denials");
    let run_a = airlock
        .admin
        .get(&format!("/v1/runs/{a}"))
        .await
        .expect("run");
    assert_eq!((effects_a.len(), reads_a.len()), (2, 2));
    let before_b = (
        airlock.effects(&b).await,
        airlock.reads(&b).await.expect("reads"),
        airlock
            .admin
            .get(&format!("/v1/runs/{b}/denials"))
            .await
            .expect("denials"),
    );

    let first = fx.dir.path().join("a.ndjson");
    let (ok, _, err) = cli(
        &fx,
        &[
            "runs",
            "export",
            &a,
            "--output",
            first.to_str().expect("path"),
        ],
    );
    assert!(ok, "{err}");
    let exported = lines(&first);
    let counts = count_kinds(&exported);
    let decisions = run_a["decisions"].as_array().expect("decisions").len() as u64
        + exported
            .iter()
            .filter(|l| l["kind"] == "effect")
            .map(|l| l["decisions"].as_array().map_or(0, Vec::len) as u64)
            .sum::<u64>();
    assert_eq!(exported[0]["kind"], "export");
    assert_eq!(exported[0]["format"], "airlock-run-export/1");
    assert_eq!(counts["run"], 1);
    assert_eq!(counts["read"], reads_a.len() as u64);
    assert_eq!(counts["effect"], effects_a.len() as u64);
    assert_eq!(
        counts["release"],
        effects_a.len() as u64,
        "one release each"
    );
    let listed_denials = denials_a["denials"].as_array().expect("list").len() as u64;
    assert!(listed_denials >= 1, "{denials_a}");
    assert_eq!(
        counts.get("denial").copied(),
        Some(listed_denials),
        "{counts:?}"
    );
    assert_eq!(counts["decision"], decisions);
    assert!(decisions >= 3, "commit, and an approval per effect");
    let end = exported.last().expect("lines");
    assert_eq!(end["kind"], "end");
    for (kind, count) in &counts {
        if kind != "end" {
            assert_eq!(end["counts"][kind], *count, "{kind}");
        }
    }
    let run_line = &exported[1];
    assert_eq!(run_line["id"], a.as_str());
    assert!(run_line.get("token").is_none(), "the token is not exported");
    let bodies: Vec<&str> = exported
        .iter()
        .filter(|l| l["kind"] == "effect")
        .map(|l| l["body"]["text"].as_str().expect("text body"))
        .collect();
    assert_eq!(bodies, [shared, r#"{"only":"a"}"#]);
    for release in exported.iter().filter(|l| l["kind"] == "release") {
        assert_eq!(release["status"], 200);
        assert_eq!(release["body"]["text"], r#"{"ok":true}"#);
    }
    let unique_digest = exported
        .iter()
        .find(|l| l["kind"] == "effect" && l["seq"] == 2)
        .and_then(|l| l["body_digest"].as_str())
        .expect("digest")
        .to_owned();
    let shared_digest = exported
        .iter()
        .find(|l| l["kind"] == "effect" && l["seq"] == 1)
        .and_then(|l| l["body_digest"].as_str())
        .expect("digest")
        .to_owned();

    // An open run is not finished: pruning it by itself is refused.
    let refused = airlock
        .post(&format!("/v1/runs/{b}/prune"), None)
        .await
        .expect_err("open run");
    assert!(
        refused.to_string().contains("run_not_finished"),
        "{refused}"
    );

    // A dry run names what it would remove and claims no counts (nothing was removed).
    let (ok, out, err) = cli(
        &fx,
        &["runs", "prune", "--finished-before", "0s", "--dry-run"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("would prune {a} (committed")),
        "{out}"
    );
    assert!(!out.contains("effect(s)") && !out.contains(&b), "{out}");

    let dir = fx.dir.path().join("exports");
    let (ok, out, err) = cli(
        &fx,
        &[
            "runs",
            "prune",
            "--finished-before",
            "0s",
            "--export-to",
            dir.to_str().expect("path"),
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains(&format!("pruned {a}")), "{out}");
    assert!(!out.contains(&b), "{out}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.join(format!("{a}.ndjson")))
            .expect("export")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "an export is its owner's only: {mode:o}");
    }
    assert_eq!(
        std::fs::read(dir.join(format!("{a}.ndjson"))).expect("exported before pruning"),
        std::fs::read(&first).expect("first export"),
        "the export written by prune equals the earlier one"
    );
    let gone = airlock
        .admin
        .get(&format!("/v1/runs/{a}"))
        .await
        .expect_err("pruned");
    assert!(gone.to_string().contains("HTTP 404"), "{gone}");
    let gone = airlock
        .admin
        .get(&format!(
            "/v1/effects/{}",
            effects_a[0]["id"].as_str().expect("id")
        ))
        .await
        .expect_err("pruned");
    assert!(gone.to_string().contains("HTTP 404"), "{gone}");
    let after_b = (
        airlock.effects(&b).await,
        airlock.reads(&b).await.expect("reads"),
        airlock
            .admin
            .get(&format!("/v1/runs/{b}/denials"))
            .await
            .expect("denials"),
    );
    assert_eq!(after_b, before_b, "run B is untouched");
    let b_effect = airlock
        .admin
        .get(&format!(
            "/v1/effects/{}",
            before_b.0[0]["id"].as_str().expect("id")
        ))
        .await
        .expect("B's effect");
    assert_eq!(b_effect["body"]["text"], shared, "the shared body is kept");
    let (ok, listed, err) = cli(&fx, &["runs", "list"]);
    assert!(ok, "{err}");
    assert!(listed.contains(&b) && !listed.contains(&a), "{listed}");

    // In the ledger itself: A's own bodies are gone, the one B shares is kept.
    airlock.kill();
    let ledger = open_ledger(&fx.data_dir().join("ledger"));
    let digest = |text: &str| airlock_ledger::Digest(text.to_owned());
    assert!(ledger
        .body(&digest(&unique_digest))
        .expect("body")
        .is_none());
    assert!(ledger
        .body(&digest(&shared_digest))
        .expect("body")
        .is_some());
    let ok_answer = airlock_ledger::Digest::sha256_of(br#"{"ok":true}"#);
    assert!(
        ledger.body(&ok_answer).expect("body").is_none(),
        "A's release answers are gone (B released nothing)"
    );
    assert!(ledger
        .run(&airlock_ledger::RunId(a.clone()))
        .expect("run")
        .is_none());
}

/// The sled ledger in `path`, once the killed server let go of it.
fn open_ledger(path: &Path) -> airlock_ledger::Ledger {
    for _ in 0..250 {
        if let Ok(ledger) = airlock_ledger::Ledger::open(path) {
            return ledger;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    airlock_ledger::Ledger::open(path).expect("open the ledger")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_retain_prunes_finished_runs_and_keeps_open_ones() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &["--retain", "0s"]);
    let (done, env) = airlock.create_run().await;
    let (open, _) = airlock.create_run().await;
    let base = format!("https://127.0.0.1:{}", origin.addr().port());
    let staged = curl(
        &env,
        &["-X", "POST", "--data", "x", &format!("{base}/hook")],
    )
    .await;
    assert_eq!(staged.status, 202);
    airlock
        .post(&format!("/v1/runs/{done}/abort"), None)
        .await
        .expect("abort");
    let admin = airlock.admin.clone();
    let path = format!("/v1/runs/{done}");
    let mut pruned = false;
    for _ in 0..100 {
        if admin.get(&path).await.is_err() {
            pruned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pruned, "the aborted run is pruned within 10 s");
    assert!(
        eventually(Duration::from_secs(5), || airlock
            .log()
            .lines()
            .any(|l| l.contains("pruned a finished run") && l.contains(&done)))
        .await,
        "each pruned run is logged: {}",
        airlock.log()
    );
    let kept = airlock
        .admin
        .get(&format!("/v1/runs/{open}"))
        .await
        .expect("the open run is kept");
    assert_eq!(kept["state"], "open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_is_paged_and_the_cli_follows_every_page() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(airlock.create_run().await.0);
    }
    created.sort();
    created.reverse();
    let mut seen = Vec::new();
    let mut path = "/v1/runs?limit=2".to_owned();
    loop {
        let page = airlock.admin.get(&path).await.expect("page");
        let runs = page["runs"].as_array().expect("runs");
        assert!(runs.len() <= 2);
        seen.extend(
            runs.iter()
                .map(|r| r["id"].as_str().expect("id").to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/runs?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, created, "every run once, newest first");
    let all = airlock.admin.get("/v1/runs").await.expect("default page");
    assert_eq!(all["runs"].as_array().expect("runs").len(), 5);
    assert!(all["next"].is_null());
    for bad in [
        "/v1/runs?limit=0",
        "/v1/runs?limit=1001",
        "/v1/runs?after=nope",
    ] {
        let refused = airlock.admin.get(bad).await.expect_err(bad);
        let refused = refused.to_string();
        // docs/admin-api.md: a bad page parameter is a bad query, whichever it is.
        assert!(
            refused.contains("HTTP 400") && refused.contains("bad_query"),
            "{bad}: {refused}"
        );
    }
    let (ok, out, err) = cli(&fx, &["runs", "list", "--json"]);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).expect("json");
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, created);
}

/// The run ids a review UI runs list shows, in order.
fn listed_runs(page: &str) -> Vec<String> {
    page.split("data-href=\"/runs/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The "Older runs" link of a runs list page, if any.
fn older_link(page: &str) -> Option<String> {
    let at = page.find("rel=\"next\"")?;
    let start = page[..at].rfind("href=\"")? + 6;
    let href = page[start..].split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_ui_runs_list_is_paged() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let airlock = fx.start(&loopback_policy(origin.addr().port()), &[]);
    let mut created = Vec::new();
    for _ in 0..55 {
        created.push(airlock.create_run().await.0);
    }
    created.sort();
    created.reverse();
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = crate::ui::sign_in(&airlock.admin_url, token.trim()).await;
    for filter in ["/", "/?state=open"] {
        let mut url = format!("{}{filter}", airlock.admin_url);
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let page = crate::ui::text(&crate::ui::get(&url, Some(&cookie)).await);
            let rows = listed_runs(&page);
            assert!(rows.len() <= 50, "{}", rows.len());
            seen.extend(rows);
            pages += 1;
            match older_link(&page) {
                Some(href) => url = format!("{}{href}", airlock.admin_url),
                None => break,
            }
        }
        assert_eq!(pages, 2, "{filter}: 50 rows, then 5");
        assert_eq!(seen, created, "{filter}: every run once, newest first");
    }
}
