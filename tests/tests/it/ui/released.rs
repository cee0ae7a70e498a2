//! After release the review UI shows what the world got (issue 40, item 3): a run stages a
//! GitHub pull request (the `github` adapter answers with a placeholder number) and a
//! comment on it, a reviewer commits it through the UI, the fake GitHub assigns PR 4242,
//! and the effect, run and commit pages show the real number, the URL as sent, the link
//! the origin gave and an excerpt of its answer, where they showed the placeholders
//! (`acme/widgets#?`, `acme/widgets#6850552904231873`) before. The same in Chromium is in
//! tests/tests/browser.rs.

use airlock_tests::github::{origin as fake_github, stage_pr_and_comment, PR_LINK};
use airlock_tests::Fixture;

use super::{form_fields, get, sign_in, submit, text};

/// The first `<name …>` element of `page` whose opening tag contains `attr` (e.g.
/// `id="released"`; any attribute when empty), through the first `</name>` after it.
fn element<'p>(page: &'p str, name: &str, attr: &str) -> &'p str {
    let close = format!("</{name}>");
    page.match_indices(&format!("<{name}"))
        .map(|(at, _)| &page[at..])
        .find(|rest| {
            let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
            tag.contains(attr)
        })
        .map(|rest| {
            &rest[..rest
                .find(&close)
                .map_or(rest.len(), |end| end + close.len())]
        })
        .unwrap_or_else(|| panic!("no <{name}> with {attr:?} in {page}"))
}

/// The `<tr>` of `effect` in `page`.
fn row<'p>(page: &'p str, effect: &str) -> &'p str {
    element(page, "tr", &format!("id=\"{effect}\""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_release_the_effect_run_and_commit_pages_show_the_real_pr_number_link_and_answer() {
    let fx = Fixture::new();
    let origin = fake_github(&fx).await;
    let port = origin.addr().port();
    let (airlock, run, env) = fx
        .start_run(&airlock_tests::github::policy(port), &[])
        .await;
    let api = format!("https://127.0.0.1:{port}");
    let pr = stage_pr_and_comment(&env, &api).await;
    let placeholder = pr["number"].as_u64().expect("number").to_string();
    let effects = airlock.effects(&run).await;
    let pr_effect = effects[0]["id"].as_str().expect("id").to_owned();
    let comment_effect = effects[1]["id"].as_str().expect("id").to_owned();
    let admin = airlock.admin_url.clone();
    let token = std::fs::read_to_string(fx.data_dir().join("admin.token")).expect("token");
    let cookie = sign_in(&admin, token.trim()).await;
    let page = |path: String| {
        let (admin, cookie) = (admin.clone(), cookie.clone());
        async move {
            let out = get(&format!("{admin}{path}"), Some(&cookie)).await;
            assert_eq!(out.status, 200, "{path}: {}", text(&out));
            text(&out)
        }
    };

    // Before release the pages show what was staged: the placeholders.
    let staged = page(format!("/runs/{run}")).await;
    assert!(
        row(&staged, &pr_effect).contains("open PR acme/widgets#?"),
        "{staged}"
    );
    assert!(
        row(&staged, &comment_effect).contains(&format!("comment on acme/widgets#{placeholder}")),
        "{staged}"
    );
    assert!(!staged.contains("What the commit released"), "{staged}");

    // The reviewer commits through the confirmation, approving both.
    let confirm = page(format!("/runs/{run}/commit")).await;
    let action = format!("/runs/{run}/commit");
    let fields = form_fields(&confirm, &action, "Approve 2 undecided and commit");
    let commit = submit(&format!("{admin}{action}"), &cookie, &fields).await;
    assert_eq!(commit.status, 303, "{}", text(&commit));
    let received: Vec<String> = origin
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        received,
        [
            "POST /repos/acme/widgets/pulls",
            "POST /repos/acme/widgets/issues/4242/comments"
        ],
        "each effect reached the origin once, the comment with the real number"
    );
    let sent_comment = format!("POST {api}/repos/acme/widgets/issues/4242/comments");

    // The effect page of the PR: the real number in the heading, the real values, the
    // link and the answer.
    let pr_page = page(format!("/effects/{pr_effect}")).await;
    let heading = element(&pr_page, "h1", "");
    assert!(heading.contains("open PR acme/widgets#4242"), "{heading}");
    assert!(!heading.contains("#?"), "{heading}");
    let released = element(&pr_page, "section", "id=\"released\"");
    assert!(released.contains("Released as"), "{released}");
    assert!(
        released.contains(&format!("href=\"{PR_LINK}\"")),
        "the origin's link: {released}"
    );
    assert!(
        released.contains("real <code>/number</code>") && released.contains("<code>4242</code>"),
        "{released}"
    );
    assert!(
        released.contains("HTTP 201") && released.contains("&quot;number&quot;:4242"),
        "an excerpt of the origin's answer: {released}"
    );
    assert!(
        released.contains("staged as") && released.contains("open PR acme/widgets#?"),
        "and what was staged: {released}"
    );

    // The comment's page: the URL as sent, with the real number; no placeholder on top.
    let comment_page = page(format!("/effects/{comment_effect}")).await;
    let heading = element(&comment_page, "h1", "");
    assert!(
        heading.contains("comment on acme/widgets#4242"),
        "{heading}"
    );
    let request = element(&comment_page, "p", "class=\"requestline\"");
    assert!(request.contains(&sent_comment), "{request}");
    for top in [heading, request] {
        assert!(!top.contains(&placeholder), "{top}");
    }
    let released = element(&comment_page, "section", "id=\"released\"");
    assert!(
        released.contains(&format!("href=\"{PR_LINK}#issuecomment-5001\"")),
        "{released}"
    );
    assert!(
        released.contains(&format!("/issues/{placeholder}/comments")),
        "the staged URL, as staged: {released}"
    );

    // The run page: each row with the real summary, the request as sent, the link and
    // the answer; the placeholders stay only in the lineage (what the comment carried).
    let run_page = page(format!("/runs/{run}")).await;
    let pr_row = row(&run_page, &pr_effect);
    assert!(pr_row.contains("open PR acme/widgets#4242"), "{pr_row}");
    assert!(pr_row.contains(&format!("href=\"{PR_LINK}\"")), "{pr_row}");
    assert!(pr_row.contains("<code>/number = 4242</code>"), "{pr_row}");
    assert!(
        pr_row.contains("&quot;html_url&quot;"),
        "the answer: {pr_row}"
    );
    let comment_row = row(&run_page, &comment_effect);
    assert!(
        comment_row.contains("comment on acme/widgets#4242"),
        "{comment_row}"
    );
    assert!(
        comment_row.contains(&format!("sent as <code>{sent_comment}</code>")),
        "{comment_row}"
    );
    assert!(!run_page.contains("acme/widgets#?"), "{run_page}");
    assert!(
        !run_page.contains(&format!("acme/widgets#{placeholder}")),
        "{run_page}"
    );
    let graph = element(&run_page, "svg", "");
    assert!(!graph.contains(&placeholder), "{graph}");
    assert!(
        run_page.contains(&format!("href=\"/runs/{run}/commit\"")),
        "a link to what the commit released: {run_page}"
    );

    // The commit page now reports what the commit released, with the real values.
    let report = page(format!("/runs/{run}/commit")).await;
    let list = element(&report, "table", "id=\"released-list\"");
    assert!(list.contains("open PR acme/widgets#4242"), "{list}");
    assert!(list.contains("comment on acme/widgets#4242"), "{list}");
    assert!(list.contains(&sent_comment), "{list}");
    assert!(list.contains(&format!("href=\"{PR_LINK}\"")), "{list}");
    assert!(list.contains("HTTP 201"), "{list}");
    assert!(
        list.contains("&quot;id&quot;:5001"),
        "the comment's answer: {list}"
    );
    assert!(!report.contains(&placeholder), "{report}");
    assert!(!report.contains("#?"), "{report}");
    assert_eq!(origin.received().len(), 2, "the pages sent nothing");
}
