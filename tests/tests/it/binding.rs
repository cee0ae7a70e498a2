//! Reliability issue #20, item 1: a commit confirmation (and every bulk approval) is tied
//! to the effects it showed. The review UI's commit and approve-by-rule forms, `POST
//! /v1/runs/{id}/commit` with `approve_pending`, and `airlock commit --approve-pending`
//! carry the set they were shown; when the agent stages another effect in between, the
//! server refuses and nothing reaches the origin, and confirming the fresh set releases
//! all of it, once.

use std::collections::BTreeMap;

use airlock_tests::{curl, loopback_policy, ok_origin, Airlock, ClientError, Fixture, Origin};
use serde_json::{json, Value};

use crate::cli::cli;
use crate::ui::{form_fields, get, post_form, sign_in, submit, text};

/// A run of the loopback policy (every write staged by rule `writes`) with `/a` and `/b`
/// staged.
struct Staged {
    fx: Fixture,
    origin: Origin,
    airlock: Airlock,
    run: String,
    env: BTreeMap<String, String>,
}

impl Staged {
    async fn start() -> Self {
        let fx = Fixture::new();
        let origin = ok_origin(&fx.origin_ca).await;
        let (airlock, run, env) = fx
            .start_run(&loopback_policy(origin.addr().port()), &[])
            .await;
        let staged = Self {
            fx,
            origin,
            airlock,
            run,
            env,
        };
        staged.stage("/a").await;
        staged.stage("/b").await;
        staged
    }

    /// The agent stages `POST path`; returns the effect id.
    async fn stage(&self, path: &str) -> String {
        let url = format!("https://127.0.0.1:{}{path}", self.origin.addr().port());
        let out = curl(&self.env, &["-X", "POST", "--data", path, &url]).await;
        assert_eq!(out.status, 202, "{path} is staged: {}", out.stderr);
        out.header("airlock-effect").expect("airlock-effect")
    }

    /// What the origin received, as `METHOD path`, in order.
    fn received(&self) -> Vec<String> {
        self.origin
            .received()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// The run's state and its effects' states, from the admin API.
    async fn states(&self) -> (String, Vec<String>) {
        let run = self
            .airlock
            .admin
            .get(&format!("/v1/runs/{}", self.run))
            .await
            .expect("run");
        let effects = self.airlock.effects(&self.run).await;
        (
            run["state"].as_str().unwrap_or_default().to_owned(),
            effects
                .iter()
                .map(|e| e["state"].as_str().unwrap_or_default().to_owned())
                .collect(),
        )
    }

    async fn cookie(&self) -> String {
        let token = std::fs::read_to_string(self.fx.data_dir().join("admin.token")).expect("token");
        sign_in(&self.airlock.admin_url, token.trim()).await
    }
}

const ALL_THREE: [&str; 3] = ["POST /a", "POST /b", "POST /c"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uis_commit_confirmation_is_tied_to_what_it_shows() {
    let s = Staged::start().await;
    let cookie = s.cookie().await;
    let action = format!("/runs/{}/commit", s.run);
    let url = format!("{}{action}", s.airlock.admin_url);
    let page = text(&get(&url, Some(&cookie)).await);
    assert!(page.contains("Approve 2 undecided and commit"), "{page}");
    let shown = form_fields(&page, &action, "approve_pending");

    // The agent stages a third effect; the reviewer confirms the page as it was shown.
    let third = s.stage("/c").await;
    let refused = submit(&url, &cookie, &shown).await;
    assert_eq!(refused.status, 409, "{}", text(&refused));
    let fresh = text(&refused);
    assert!(
        fresh
            .contains("Nothing was approved or released: the run changed since the page was shown"),
        "{fresh}"
    );
    let added = fresh
        .split("id=\"changed-added\"")
        .nth(1)
        .expect("the added effects");
    let added = added.split("</table>").next().expect("table");
    assert!(added.contains(&third) && added.contains("/c"), "{added}");
    assert!(fresh.contains("Approve 3 undecided and commit"), "{fresh}");
    assert!(
        s.received().is_empty(),
        "the origin got nothing: {:?}",
        s.received()
    );
    assert_eq!(
        s.states().await,
        ("open".to_owned(), vec!["staged".to_owned(); 3])
    );

    // A form without the set it showed is refused too.
    let csrf = &shown.iter().find(|(n, _)| n == "csrf").expect("csrf").1;
    let bare = post_form(
        &url,
        Some(&cookie),
        &[("csrf", csrf), ("approve_pending", "true")],
    )
    .await;
    assert_eq!(bare.status, 400, "{}", text(&bare));
    assert!(
        text(&bare).contains("expectation_required"),
        "{}",
        text(&bare)
    );
    assert!(s.received().is_empty());

    // Confirming the fresh page releases all three, each once.
    let fields = form_fields(&fresh, &action, "approve_pending");
    let done = submit(&url, &cookie, &fields).await;
    assert_eq!(done.status, 303, "{}", text(&done));
    assert_eq!(s.received(), ALL_THREE);
    assert_eq!(
        s.states().await,
        ("committed".to_owned(), vec!["released".to_owned(); 3])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uis_approve_all_staged_by_rule_is_tied_to_what_it_shows() {
    let s = Staged::start().await;
    let cookie = s.cookie().await;
    let admin = &s.airlock.admin_url;
    let run_page = text(&get(&format!("{admin}/runs/{}", s.run), Some(&cookie)).await);
    assert!(
        run_page.contains("Approve all 2 staged by writes"),
        "{run_page}"
    );
    let action = format!("/runs/{}/approve-rule", s.run);
    let shown = form_fields(&run_page, &action, "value=\"writes\"");

    let third = s.stage("/c").await;
    let refused = submit(&format!("{admin}{action}"), &cookie, &shown).await;
    assert_eq!(refused.status, 409, "{}", text(&refused));
    let fresh = text(&refused);
    assert!(
        fresh.contains("the run changed since the page was shown"),
        "{fresh}"
    );
    let added = fresh
        .split("id=\"changed-added\"")
        .nth(1)
        .expect("the added effects");
    assert!(added.contains(&third), "{added}");
    assert!(fresh.contains("Approve all 3 staged by writes"), "{fresh}");
    assert_eq!(
        s.states().await,
        ("open".to_owned(), vec!["staged".to_owned(); 3]),
        "nothing was approved"
    );

    // The fresh button approves the three; the commit page then releases them, once.
    let fields = form_fields(&fresh, &action, "value=\"writes\"");
    let done = submit(&format!("{admin}{action}"), &cookie, &fields).await;
    assert_eq!(done.status, 303, "{}", text(&done));
    assert_eq!(
        done.header("location").as_deref(),
        Some(format!("/runs/{}?approved=3&skipped=0", s.run).as_str())
    );
    assert_eq!(s.states().await.1, vec!["approved".to_owned(); 3]);
    assert!(s.received().is_empty(), "approving sends nothing");
    let commit = format!("/runs/{}/commit", s.run);
    let page = text(&get(&format!("{admin}{commit}"), Some(&cookie)).await);
    let fields = form_fields(&page, &commit, "Commit: release 3 effect(s)");
    let done = submit(&format!("{admin}{commit}"), &cookie, &fields).await;
    assert_eq!(done.status, 303, "{}", text(&done));
    assert_eq!(s.received(), ALL_THREE);
}

/// The admin API's error: status, code, details.
fn api_error(error: ClientError) -> (u16, String, Value) {
    match error {
        ClientError::Api {
            status,
            code,
            details,
            ..
        } => (status, code, details.unwrap_or(Value::Null)),
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apis_commit_with_approve_pending_is_tied_to_what_was_shown() {
    let s = Staged::start().await;
    let path = format!("/v1/runs/{}/commit", s.run);
    let listed = s
        .airlock
        .admin
        .get(&format!("/v1/runs/{}/effects", s.run))
        .await
        .expect("effects");
    let shown = listed["expect"].clone();
    assert_eq!(shown["through_seq"], 2, "{listed:#}");

    let third = s.stage("/c").await;
    let body = json!({"approve_pending": true, "expect": shown});
    let (status, code, details) = api_error(
        s.airlock
            .post(&path, Some(body))
            .await
            .expect_err("the set changed"),
    );
    assert_eq!((status, code.as_str()), (409, "set_changed"), "{details:#}");
    assert_eq!(details["expected"], shown);
    assert_eq!(details["now"]["through_seq"], 3);
    assert_eq!(details["added"][0]["id"], third.as_str(), "{details:#}");
    assert_eq!(details["covered"].as_array().map(Vec::len), Some(3));
    assert!(s.received().is_empty(), "{:?}", s.received());
    assert_eq!(
        s.states().await,
        ("open".to_owned(), vec!["staged".to_owned(); 3])
    );

    // approve_pending without saying what was shown is refused (RFC 6585 428).
    let (status, code, _) = api_error(
        s.airlock
            .post(&path, Some(json!({"approve_pending": true})))
            .await
            .expect_err("no expectation"),
    );
    assert_eq!((status, code.as_str()), (428, "expectation_required"));
    assert!(s.received().is_empty());
    assert_eq!(s.states().await.0, "open");

    // Bound to the fresh listing, the commit releases all three, each once.
    let report = s.airlock.commit_pending(&s.run).await;
    assert_eq!(report["state"], "committed", "{report:#}");
    assert_eq!(s.received(), ALL_THREE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airlock_commit_approve_pending_is_tied_to_what_it_printed() {
    let s = Staged::start().await;
    let (ok, listed, err) = cli(&s.fx, &["effects", &s.run]);
    assert!(ok, "{err}");
    let expect = listed
        .lines()
        .find_map(|l| l.strip_prefix("expect "))
        .unwrap_or_else(|| panic!("an expectation line: {listed}"))
        .trim()
        .to_owned();
    assert!(expect.starts_with("2:sha256:"), "{expect}");

    let third = s.stage("/c").await;
    let (ok, out, err) = cli(
        &s.fx,
        &["commit", &s.run, "--approve-pending", "--expect", &expect],
    );
    assert!(!ok, "{out}");
    assert!(err.contains("set_changed"), "{err}");
    assert!(
        err.contains("hint: nothing was approved or released"),
        "{err}"
    );
    assert!(err.contains(&format!("#3 {third} POST")), "{err}");
    assert!(s.received().is_empty(), "{:?}", s.received());
    assert_eq!(
        s.states().await,
        ("open".to_owned(), vec!["staged".to_owned(); 3])
    );

    // Without --expect it binds the commit to the list it prints first.
    let (ok, out, err) = cli(&s.fx, &["commit", &s.run, "--approve-pending"]);
    assert!(ok, "{err}");
    let (approving, report) = out.split_once("\nrun ").expect("the list, then the report");
    assert!(
        approving.starts_with("approving 3 undecided effect(s) of ")
            && approving.contains("(expect 3:sha256:"),
        "{approving}"
    );
    for path in ["/a", "/b", "/c"] {
        assert!(approving.contains(path), "{path} listed: {approving}");
    }
    assert!(report.contains("committed"), "{report}");
    assert_eq!(s.received(), ALL_THREE);
}
