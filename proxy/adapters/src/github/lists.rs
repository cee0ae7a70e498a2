//! Staged objects in list reads: `GET /repos/{owner}/{repo}/pulls`, `…/issues`,
//! `…/issues/{number}/comments` and `…/issues/comments` answered by the origin, with the
//! run's staged pull requests, issues and comments merged in where GitHub would list them.
//!
//! Order and pagination follow the REST docs (<https://docs.github.com/en/rest/pulls/pulls#list-pull-requests>,
//! <https://docs.github.com/en/rest/issues/issues#list-repository-issues>,
//! <https://docs.github.com/en/rest/issues/comments>): pulls and issues are listed newest
//! first by default (`sort=created`, `direction=desc`), so staged ones, created last, go
//! on top of the first page; comments are listed oldest first (ascending id), so staged
//! ones go after the last page (the page whose answer has no `rel="next"` link).
//! Limits, kept simple and documented in docs/adapters.md:
//! - the page gets the staged items in addition to the origin's `per_page`: nothing the
//!   origin listed is pushed to a page the client may not ask for;
//! - a staged pull request or issue is `open`: it is listed for `state` `open` (the
//!   default) or `all`; `head` and `base` of pulls are compared to the staged input;
//! - a filter airlock does not evaluate (issues' `labels`, `milestone`, `assignee`,
//!   `creator`, `mentioned`, `since`; pulls' `sort=popularity`/`long-running`) lists no
//!   staged items, rather than wrong ones.

use serde_json::{json, Value};

use super::objects::{comment, issue, pull, string_field};
use super::{endpoint, repo_path};
use crate::{Call, Staged};

/// A list read the GitHub adapter merges staged objects into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List<'a> {
    /// `GET …/pulls`.
    Pulls,
    /// `GET …/issues` (pull requests are issues too).
    Issues,
    /// `GET …/issues/{number}/comments`.
    IssueComments(&'a str),
    /// `GET …/issues/comments` (the whole repository's).
    RepoComments,
}

fn list_of<'a>(rest: &[&'a str]) -> Option<List<'a>> {
    match rest {
        ["pulls"] => Some(List::Pulls),
        ["issues"] => Some(List::Issues),
        ["issues", "comments"] => Some(List::RepoComments),
        ["issues", number, "comments"] => Some(List::IssueComments(number)),
        _ => None,
    }
}

/// Whether `method url` is a list read staged objects may be merged into.
pub(crate) fn is_list(method: &str, url: &str) -> bool {
    let call = Call {
        method,
        url,
        headers: Vec::new(),
        body: &[],
        template: None,
        context: None,
    };
    method == "GET" && repo_path(call.path()).is_some_and(|r| list_of(&r.rest).is_some())
}

/// The origin's list `page` (a JSON array) with the staged objects of `staged` (the run's
/// effects not yet released, in staging order) merged in; `link` is the answer's `Link`
/// header. `None` when nothing is merged (not a list, no staged item belongs on this page,
/// a filter airlock does not evaluate, or a page that is not a JSON array).
pub(crate) fn merge(
    call: &Call<'_>,
    link: Option<&str>,
    page: &[u8],
    staged: &[Staged],
) -> Option<(Vec<u8>, usize)> {
    if call.method != "GET" {
        return None;
    }
    let repo = repo_path(call.path())?;
    let list = list_of(&repo.rest)?;
    let params = query_pairs(call.query().unwrap_or(""));
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let same_repo = |s: &&Staged| {
        let c = s.call();
        s.effect.adapter.as_deref() == Some("github")
            && c.authority() == call.authority()
            && repo_path(c.path()).is_some_and(|r| r.owner == repo.owner && r.repo == repo.repo)
    };
    let of_kind = |kind: &'static str| {
        staged.iter().filter(same_repo).filter(move |s| {
            let c = s.call();
            repo_path(c.path()).is_some_and(|r| endpoint(&s.effect.method, &r.rest) == Some(kind))
        })
    };
    let first_page = param("page").is_none_or(|p| p.trim() == "1");
    let last_page = !link.is_some_and(|l| l.contains("rel=\"next\""));
    let open = matches!(param("state"), None | Some("open") | Some("all"));
    let newest_first = |sorts: &[&str]| {
        let sorted_by_time = param("sort").is_none_or(|s| sorts.contains(&s));
        sorted_by_time && param("direction").is_none_or(|d| d == "desc")
    };
    // Items to put on top (newest first) or at the end (oldest first) of this page.
    let (items, on_top): (Vec<Value>, bool) = match list {
        List::Pulls => {
            if !open || !newest_first(&["created", "updated"]) || !first_page {
                return None;
            }
            let items = of_kind("pulls.create")
                .filter(|s| {
                    let input = s.call().json().unwrap_or(Value::Null);
                    let head = string_field(&input, "head");
                    let head_ok = param("head").is_none_or(|want| {
                        want == head || want.split_once(':').is_some_and(|(_, b)| b == head)
                    });
                    head_ok && param("base").is_none_or(|b| b == string_field(&input, "base"))
                })
                .filter_map(|s| {
                    let c = s.call();
                    Some(pull(&c, &s.effect, &repo_path(c.path())?))
                })
                .collect();
            (items, true)
        }
        List::Issues => {
            let unevaluated = [
                "labels",
                "milestone",
                "assignee",
                "creator",
                "mentioned",
                "since",
            ];
            if !open
                || !newest_first(&["created", "updated"])
                || !first_page
                || unevaluated.iter().any(|f| param(f).is_some())
            {
                return None;
            }
            let items = staged
                .iter()
                .filter(same_repo)
                .filter_map(|s| {
                    let c = s.call();
                    let r = repo_path(c.path())?;
                    match endpoint(&s.effect.method, &r.rest)? {
                        "issues.create" => Some(issue(&c, &s.effect, &r)),
                        "pulls.create" => Some(pull_as_issue(&c, s, &r)),
                        _ => None,
                    }
                })
                .collect();
            (items, true)
        }
        List::IssueComments(number) => {
            let items = of_kind("issues.comment")
                .filter_map(|s| {
                    let c = s.call();
                    let r = repo_path(c.path())?;
                    (r.rest.get(1) == Some(&number)).then(|| comment(&c, &s.effect, &r))
                })
                .collect();
            (items, false)
        }
        List::RepoComments => {
            let descending = param("sort").is_some() && param("direction") == Some("desc");
            let items = of_kind("issues.comment")
                .filter_map(|s| {
                    let c = s.call();
                    Some(comment(&c, &s.effect, &repo_path(c.path())?))
                })
                .collect();
            (items, descending)
        }
    };
    if items.is_empty() || (on_top && !first_page) || (!on_top && !last_page) {
        return None;
    }
    let Ok(Value::Array(origin)) = serde_json::from_slice::<Value>(page) else {
        return None;
    };
    let count = items.len();
    let merged: Vec<Value> = if on_top {
        items.into_iter().rev().chain(origin).collect()
    } else {
        origin.into_iter().chain(items).collect()
    };
    serde_json::to_vec(&Value::Array(merged))
        .ok()
        .map(|bytes| (bytes, count))
}

/// A staged pull request as the issues list shows it: its issue object with a
/// `pull_request` member (GitHub: "every pull request is an issue").
pub(super) fn pull_as_issue(call: &Call<'_>, staged: &Staged, repo: &super::RepoPath<'_>) -> Value {
    let mut as_issue = issue(call, &staged.effect, repo);
    let pr = pull(call, &staged.effect, repo);
    as_issue["pull_request"] = json!({
        "url": pr["url"], "html_url": pr["html_url"], "diff_url": pr["diff_url"],
        "patch_url": pr["patch_url"], "merged_at": null,
    });
    as_issue
}

fn hex(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// `application/x-www-form-urlencoded` pairs of a query (`+` is a space; bad escapes kept
/// as written).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    let decode = |text: &str| {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push(high << 4 | low);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                },
                byte => out.push(byte),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_reads_are_recognised_by_method_and_path() {
        for (method, url, want) in [
            (
                "GET",
                "https://api.github.com/repos/o/r/pulls?state=all",
                true,
            ),
            ("GET", "https://api.github.com/repos/o/r/issues", true),
            (
                "GET",
                "https://api.github.com/repos/o/r/issues/7/comments",
                true,
            ),
            (
                "GET",
                "https://api.github.com/repos/o/r/issues/comments",
                true,
            ),
            ("GET", "https://ghe.example/api/v3/repos/o/r/pulls", true),
            ("POST", "https://api.github.com/repos/o/r/pulls", false),
            ("GET", "https://api.github.com/repos/o/r/pulls/7", false),
            ("GET", "https://api.github.com/user/repos", false),
        ] {
            assert_eq!(is_list(method, url), want, "{method} {url}");
        }
    }

    #[test]
    fn query_pairs_are_form_decoded() {
        assert_eq!(
            query_pairs("head=o%3Aagent%2Fa&state=all&q=a+b&bad=%zz&&flag"),
            [
                ("head".to_owned(), "o:agent/a".to_owned()),
                ("state".to_owned(), "all".to_owned()),
                ("q".to_owned(), "a b".to_owned()),
                ("bad".to_owned(), "%zz".to_owned()),
                ("flag".to_owned(), String::new()),
            ]
        );
    }
}
