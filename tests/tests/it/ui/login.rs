//! Signing in (issue #20 item 7): `GET /login?token=` signs nobody in, and the link
//! `airlock ui` prints is one-time, good once within 5 minutes, confirmed with a button
//! when another site opened it.

use airlock_tests::review::Scenario;

use super::{csrf_free_form, get, post_form, text};

/// Runs `airlock ui --url-only` against the scenario's server; returns the printed URL.
fn airlock_ui(s: &Scenario) -> String {
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .args(["ui", "--url-only", "--data"])
        .arg(s.fx.data_dir())
        .env_remove("AIRLOCK_ADMIN")
        .env_remove("AIRLOCK_TOKEN")
        .output()
        .expect("airlock ui");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_login_with_a_token_signs_nobody_in_and_the_airlock_ui_link_works_once() {
    let s = Scenario::start(&[]).await;
    let admin = s.admin_url();

    // The token in a URL, as a page of another site would make the browser follow it,
    // and as a bookmark would: no session either way.
    for cookie_free in [
        get(&format!("{admin}/login?token={}", s.token), None).await,
        super::get_with(
            &format!("{admin}/login?token={}", s.token),
            &["Sec-Fetch-Site: cross-site"],
        )
        .await,
    ] {
        assert_eq!(cookie_free.status, 400, "{}", text(&cookie_free));
        assert!(cookie_free.header("set-cookie").is_none());
        assert!(
            text(&cookie_free).contains("airlock ui"),
            "{}",
            text(&cookie_free)
        );
        assert!(
            !text(&cookie_free).contains(&s.token),
            "the token is not echoed"
        );
    }

    // `airlock ui` prints a link that carries no token and signs in once.
    let url = airlock_ui(&s);
    assert!(url.starts_with(&format!("{admin}/login?code=")), "{url}");
    assert!(!url.contains(&s.token), "{url}");
    let first = get(&url, None).await;
    assert_eq!(first.status, 303, "{}", text(&first));
    let cookie = first.header("set-cookie").expect("a session");
    let cookie = cookie.split(';').next().expect("name=value").to_owned();
    let page = get(&format!("{admin}/"), Some(&cookie)).await;
    assert_eq!(page.status, 200);
    assert!(text(&page).contains(&s.run), "signed in: the runs list");
    let again = get(&url, None).await;
    assert_eq!(again.status, 401, "a used link signs nobody in");
    assert!(again.header("set-cookie").is_none());
    assert!(text(&again).contains("used already"), "{}", text(&again));

    // A link another site opens is not used at once: the page asks, and only the button
    // (a POST from the UI's own page) signs in, once.
    let url = airlock_ui(&s);
    let opened = super::get_with(&url, &["Sec-Fetch-Site: cross-site"]).await;
    assert_eq!(opened.status, 200);
    assert!(opened.header("set-cookie").is_none(), "not signed in yet");
    let page = text(&opened);
    assert!(page.contains("Sign in as admin"), "{page}");
    let code = url.split("code=").nth(1).expect("the code");
    assert!(
        page.contains(&format!("name=\"code\" value=\"{code}\"")),
        "{page}"
    );
    let posted = csrf_free_form(&format!("{admin}/login"), &[("code", code)]).await;
    assert_eq!(posted.status, 303, "{}", text(&posted));
    assert!(posted.header("set-cookie").is_some());
    let reused = post_form(&format!("{admin}/login"), None, &[("code", code)]).await;
    assert_eq!(reused.status, 401);
    assert!(reused.header("set-cookie").is_none());
}
