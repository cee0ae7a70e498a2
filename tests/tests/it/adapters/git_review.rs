//! A staged `git push` shows the reviewer what it carries, read from the pack: the commit
//! messages, authors, changed paths and a diffstat, in the API, `airlock show` and the
//! effect summary (issue 21, item 10).

use airlock_tests::git_http::{self, git};
use airlock_tests::Fixture;

use super::git::{push, remote, Remote};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_push_review_names_commit_messages_authors_and_paths() {
    if !git_http::available() {
        eprintln!("git is not installed: skipped");
        return;
    }
    let fx = Fixture::new();
    let Remote {
        origin: _origin,
        root: _root,
        work,
        airlock,
        run,
        env,
        ..
    } = remote(&fx).await;

    git(&work, &["checkout", "-q", "-b", "agent/docs"]);
    std::fs::create_dir_all(work.join("docs")).expect("mkdir");
    std::fs::write(work.join("docs/guide.md"), "# Guide\n\nStep one.\n").expect("write");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "Add the guide"]);
    std::fs::write(
        work.join("docs/guide.md"),
        "# Guide\n\nStep one.\nStep two.\n",
    )
    .expect("write");
    std::fs::write(work.join("README"), "hello\nworld\n").expect("write");
    git(&work, &["add", "-A"]);
    git(
        &work,
        &["commit", "-q", "-m", "Extend the guide and README"],
    );

    let out = push(&work, &env, "agent/docs").await;
    assert!(
        out.status.success(),
        "git push exits 0: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let effects = airlock.effects(&run).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    let summary = effects[0]["summary"].as_str().expect("summary");
    for expected in [
        "2 commit(s)",
        "'Extend the guide and README' (Tester <tester@example.invalid>)",
        "'Add the guide'",
        "docs/guide.md",
        "README",
    ] {
        assert!(summary.contains(expected), "{expected:?} in {summary}");
    }

    let id = effects[0]["id"].as_str().expect("id");
    let shown = airlock
        .admin
        .get(&format!("/v1/effects/{id}"))
        .await
        .expect("show");
    let details = &shown["details"];
    let subjects: Vec<&str> = details["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .filter_map(|c| c["subject"].as_str())
        .collect();
    assert_eq!(
        subjects,
        ["Extend the guide and README", "Add the guide"],
        "{details}"
    );
    assert_eq!(
        details["commits"][0]["author"],
        "Tester <tester@example.invalid>"
    );
    // The newer commit's parent is in the pack: its diff is exact where both blobs are
    // (README's older blob is on the server: its lines now, removed unknown).
    let newest: Vec<String> = details["commits"][0]["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| {
            format!(
                "{} {} +{} -{}",
                p["path"], p["change"], p["added"], p["removed"]
            )
        })
        .collect();
    assert_eq!(
        newest,
        [r#""README" "M" +2 -null"#, r#""docs/guide.md" "M" +1 -0"#],
        "{details}"
    );
    let paths: Vec<&str> = details["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    assert_eq!(paths, ["README", "docs/guide.md"], "{details}");

    let (ok, text, err) = crate::cli::cli(&fx, &["show", id]);
    assert!(ok, "{err}");
    assert!(
        text.contains("Tester <tester@example.invalid> — Extend the guide and README"),
        "{text}"
    );
    assert!(text.contains("Add the guide"), "{text}");
    assert!(text.contains("docs/guide.md"), "{text}");
    assert!(text.contains("paths    2 changed"), "{text}");

    // The review UI's effect page shows the same.
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = crate::ui::sign_in(&airlock.admin_url, token.trim()).await;
    let page = crate::ui::text(
        &crate::ui::get(
            &format!("{}/effects/{id}", airlock.admin_url),
            Some(&cookie),
        )
        .await,
    );
    assert!(page.contains("What the push carries"), "{page}");
    assert!(page.contains("Extend the guide and README"), "{page}");
    assert!(
        page.contains("Tester &lt;tester@example.invalid&gt;"),
        "{page}"
    );
    assert!(page.contains("docs/guide.md"), "{page}");
}
