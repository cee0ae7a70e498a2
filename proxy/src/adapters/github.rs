//! `github`: GitHub REST v3 writes answered with the documented objects
//! (<https://docs.github.com/en/rest>): every field the documentation lists as always
//! present is there; numbers, ids, node ids and shas only GitHub can assign are
//! placeholders, and URLs are built from them. Reads of staged pull requests, issues and
//! their comments are answered from staged state.
//!
//! Works for github.com (`api.github.com`, HTML on `github.com`) and for any host with the
//! API under a prefix (GitHub Enterprise's `/api/v3`): the prefix is whatever precedes
//! `/repos/` in the path.

use airlock_ledger::{Effect, ValueKind};
use serde_json::{json, Value};

use super::{
    excerpt, placeholder, placeholder_json, rfc3339, Adapter, Call, Compensation, Plan, Staged,
    Synthetic,
};

/// The GitHub REST adapter.
#[derive(Debug, Clone, Copy)]
pub struct GitHub;

/// A request path under `/repos/{owner}/{repo}/`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RepoPath<'a> {
    /// What precedes `/repos/` (empty on api.github.com, `/api/v3` on GitHub Enterprise).
    prefix: &'a str,
    owner: &'a str,
    repo: &'a str,
    /// The segments after the repository.
    rest: Vec<&'a str>,
}

fn repo_path(path: &str) -> Option<RepoPath<'_>> {
    let at = path.find("/repos/")?;
    let mut segments = path[at + 7..].split('/');
    let owner = segments.next().filter(|s| !s.is_empty())?;
    let repo = segments.next().filter(|s| !s.is_empty())?;
    Some(RepoPath {
        prefix: &path[..at],
        owner,
        repo,
        rest: segments.collect(),
    })
}

/// The endpoint of a write, from method and path.
fn endpoint(method: &str, rest: &[&str]) -> Option<&'static str> {
    match (method, rest) {
        ("POST", ["pulls"]) => Some("pulls.create"),
        ("POST", ["issues"]) => Some("issues.create"),
        ("POST", ["issues", _, "comments"]) => Some("issues.comment"),
        ("POST", ["issues", _, "labels"]) => Some("issues.labels"),
        ("PUT", ["contents", ..]) if rest.len() > 1 => Some("contents.put"),
        ("POST", ["releases"]) => Some("releases.create"),
        ("POST", ["git", "refs"]) => Some("git.refs.create"),
        _ => None,
    }
}

/// Base URLs of one repository: API and HTML.
struct Urls {
    api: String,
    html: String,
    api_root: String,
}

fn urls(call: &Call<'_>, repo: &RepoPath<'_>) -> Urls {
    let authority = call.authority();
    let scheme = if call.url.starts_with("http://") {
        "http"
    } else {
        "https"
    };
    let html_host = authority.strip_prefix("api.").unwrap_or(authority);
    let api_root = format!("{scheme}://{authority}{}", repo.prefix);
    Urls {
        api: format!("{api_root}/repos/{}/{}", repo.owner, repo.repo),
        html: format!("{scheme}://{html_host}/{}/{}", repo.owner, repo.repo),
        api_root,
    }
}

/// The user object of a staged write: GitHub fills in the authenticated user, which airlock
/// does not know; the documented fields are present with a stand-in login.
fn user(api_root: &str) -> Value {
    json!({
        "login": "airlock-staged",
        "id": 0,
        "node_id": "",
        "avatar_url": "",
        "gravatar_id": "",
        "url": format!("{api_root}/users/airlock-staged"),
        "html_url": "",
        "type": "User",
        "site_admin": false,
    })
}

fn string_field<'v>(json: &'v Value, key: &str) -> &'v str {
    json.get(key).and_then(Value::as_str).unwrap_or("")
}

fn label_names(json: &Value) -> Vec<String> {
    let list = json.get("labels").unwrap_or(json);
    list.as_array()
        .map(|labels| {
            labels
                .iter()
                .filter_map(|l| {
                    l.as_str()
                        .map(str::to_owned)
                        .or_else(|| l.get("name").and_then(Value::as_str).map(str::to_owned))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn label_objects(urls: &Urls, names: &[String], effect: &Effect, pointer_prefix: &str) -> Value {
    Value::Array(
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                json!({
                    "id": placeholder_json(effect, &format!("{pointer_prefix}/{i}/id")),
                    "node_id": placeholder_json(effect, &format!("{pointer_prefix}/{i}/node_id")),
                    "url": format!("{}/labels/{}", urls.api, name),
                    "name": name,
                    "description": null,
                    "color": "ededed",
                    "default": false,
                })
            })
            .collect(),
    )
}

/// The issue object (`GET /repos/{owner}/{repo}/issues/{number}`) of a staged issue.
fn issue(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
    let urls = urls(call, repo);
    let input = call.json().unwrap_or(Value::Null);
    let number = placeholder(effect, "/number");
    let created = rfc3339(effect.created_at_ms);
    let labels: Vec<String> = label_names(&input);
    json!({
        "id": placeholder_json(effect, "/id"),
        "node_id": placeholder_json(effect, "/node_id"),
        "url": format!("{}/issues/{number}", urls.api),
        "repository_url": urls.api,
        "labels_url": format!("{}/issues/{number}/labels{{/name}}", urls.api),
        "comments_url": format!("{}/issues/{number}/comments", urls.api),
        "events_url": format!("{}/issues/{number}/events", urls.api),
        "html_url": format!("{}/issues/{number}", urls.html),
        "number": placeholder_json(effect, "/number"),
        "state": "open",
        "state_reason": null,
        "title": string_field(&input, "title"),
        "body": input.get("body").cloned().unwrap_or(Value::Null),
        "user": user(&urls.api_root),
        "labels": label_objects(&urls, &labels, effect, "/labels"),
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "locked": false,
        "active_lock_reason": null,
        "comments": 0,
        "closed_at": null,
        "created_at": created,
        "updated_at": created,
        "author_association": "OWNER",
    })
}

/// The pull request object (`POST /repos/{owner}/{repo}/pulls`, 201) of a staged PR.
fn pull(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
    let urls = urls(call, repo);
    let input = call.json().unwrap_or(Value::Null);
    let number = placeholder(effect, "/number");
    let created = rfc3339(effect.created_at_ms);
    let head_ref = string_field(&input, "head");
    let (head_owner, head_branch) = head_ref.split_once(':').unwrap_or((repo.owner, head_ref));
    let base_branch = string_field(&input, "base");
    let side = |label_owner: &str, branch: &str, sha_pointer: &str| {
        json!({
            "label": format!("{label_owner}:{branch}"),
            "ref": branch,
            "sha": placeholder_json(effect, sha_pointer),
            "user": user(&urls.api_root),
            "repo": null,
        })
    };
    let mut out = json!({
        "url": format!("{}/pulls/{number}", urls.api),
        "id": placeholder_json(effect, "/id"),
        "node_id": placeholder_json(effect, "/node_id"),
        "html_url": format!("{}/pull/{number}", urls.html),
        "diff_url": format!("{}/pull/{number}.diff", urls.html),
        "patch_url": format!("{}/pull/{number}.patch", urls.html),
        "issue_url": format!("{}/issues/{number}", urls.api),
        "commits_url": format!("{}/pulls/{number}/commits", urls.api),
        "review_comments_url": format!("{}/pulls/{number}/comments", urls.api),
        "review_comment_url": format!("{}/pulls/comments{{/number}}", urls.api),
        "comments_url": format!("{}/issues/{number}/comments", urls.api),
        "statuses_url": format!("{}/statuses/{{sha}}", urls.api),
        "number": placeholder_json(effect, "/number"),
        "state": "open",
        "locked": false,
        "title": string_field(&input, "title"),
        "user": user(&urls.api_root),
        "body": input.get("body").cloned().unwrap_or(Value::Null),
        "labels": [],
        "milestone": null,
        "active_lock_reason": null,
        "created_at": created,
        "updated_at": created,
    });
    let more = json!({
        "closed_at": null,
        "merged_at": null,
        "merge_commit_sha": null,
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "head": side(head_owner, head_branch, "/head/sha"),
        "base": side(repo.owner, base_branch, "/base/sha"),
        "_links": {
            "self": {"href": format!("{}/pulls/{number}", urls.api)},
            "html": {"href": format!("{}/pull/{number}", urls.html)},
            "issue": {"href": format!("{}/issues/{number}", urls.api)},
            "comments": {"href": format!("{}/issues/{number}/comments", urls.api)},
        },
        "author_association": "OWNER",
        "auto_merge": null,
        "draft": input.get("draft").and_then(Value::as_bool).unwrap_or(false),
        "merged": false,
        "mergeable": null,
        "rebaseable": null,
        "mergeable_state": "unknown",
        "merged_by": null,
        "comments": 0,
        "review_comments": 0,
        "maintainer_can_modify": input.get("maintainer_can_modify").and_then(Value::as_bool).unwrap_or(false),
        "commits": 0,
        "additions": 0,
        "deletions": 0,
        "changed_files": 0,
    });
    if let (Some(out), Value::Object(more)) = (out.as_object_mut(), more) {
        out.extend(more);
    }
    out
}

/// The issue comment object of a staged comment.
fn comment(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
    let urls = urls(call, repo);
    let input = call.json().unwrap_or(Value::Null);
    let issue_number = repo.rest.get(1).copied().unwrap_or("");
    let id = placeholder(effect, "/id");
    let created = rfc3339(effect.created_at_ms);
    json!({
        "id": placeholder_json(effect, "/id"),
        "node_id": placeholder_json(effect, "/node_id"),
        "url": format!("{}/issues/comments/{id}", urls.api),
        "html_url": format!("{}/issues/{issue_number}#issuecomment-{id}", urls.html),
        "issue_url": format!("{}/issues/{issue_number}", urls.api),
        "body": string_field(&input, "body"),
        "user": user(&urls.api_root),
        "created_at": created,
        "updated_at": created,
        "author_association": "OWNER",
    })
}

fn contents(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
    let urls = urls(call, repo);
    let input = call.json().unwrap_or(Value::Null);
    let path = repo.rest[1..].join("/");
    let name = repo.rest.last().copied().unwrap_or("");
    let branch = input
        .get("branch")
        .and_then(Value::as_str)
        .unwrap_or("main");
    let sha = placeholder(effect, "/content/sha");
    let commit_sha = placeholder(effect, "/commit/sha");
    let size = input
        .get("content")
        .and_then(Value::as_str)
        .map_or(0, |b64| b64.trim_end_matches('=').len() * 3 / 4);
    let created = rfc3339(effect.created_at_ms);
    let person = json!({"name": "airlock-staged", "email": "", "date": created});
    json!({
        "content": {
            "name": name,
            "path": path,
            "sha": sha,
            "size": size,
            "url": format!("{}/contents/{path}?ref={branch}", urls.api),
            "html_url": format!("{}/blob/{branch}/{path}", urls.html),
            "git_url": format!("{}/git/blobs/{sha}", urls.api),
            "download_url": null,
            "type": "file",
            "_links": {
                "self": format!("{}/contents/{path}?ref={branch}", urls.api),
                "git": format!("{}/git/blobs/{sha}", urls.api),
                "html": format!("{}/blob/{branch}/{path}", urls.html),
            },
        },
        "commit": {
            "sha": commit_sha,
            "node_id": placeholder_json(effect, "/commit/node_id"),
            "url": format!("{}/git/commits/{commit_sha}", urls.api),
            "html_url": format!("{}/commit/{commit_sha}", urls.html),
            "author": person,
            "committer": person,
            "message": string_field(&input, "message"),
            "tree": {"url": "", "sha": ""},
            "parents": [],
            "verification": {"verified": false, "reason": "unsigned", "signature": null, "payload": null},
        },
    })
}

fn release(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
    let urls = urls(call, repo);
    let input = call.json().unwrap_or(Value::Null);
    let id = placeholder(effect, "/id");
    let tag = string_field(&input, "tag_name");
    let created = rfc3339(effect.created_at_ms);
    let draft = input.get("draft").and_then(Value::as_bool).unwrap_or(false);
    json!({
        "url": format!("{}/releases/{id}", urls.api),
        "html_url": format!("{}/releases/tag/{tag}", urls.html),
        "assets_url": format!("{}/releases/{id}/assets", urls.api),
        "upload_url": format!("{}/releases/{id}/assets{{?name,label}}", urls.api),
        "tarball_url": format!("{}/tarball/{tag}", urls.api),
        "zipball_url": format!("{}/zipball/{tag}", urls.api),
        "id": placeholder_json(effect, "/id"),
        "node_id": placeholder_json(effect, "/node_id"),
        "tag_name": tag,
        "target_commitish": input.get("target_commitish").and_then(Value::as_str).unwrap_or("main"),
        "name": input.get("name").cloned().unwrap_or(Value::Null),
        "body": input.get("body").cloned().unwrap_or(Value::Null),
        "draft": draft,
        "prerelease": input.get("prerelease").and_then(Value::as_bool).unwrap_or(false),
        "created_at": created,
        "published_at": if draft { Value::Null } else { Value::from(created.clone()) },
        "author": user(&urls.api_root),
        "assets": [],
    })
}

fn git_ref(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
    let urls = urls(call, repo);
    let input = call.json().unwrap_or(Value::Null);
    let name = string_field(&input, "ref");
    let sha = string_field(&input, "sha");
    json!({
        "ref": name,
        "node_id": placeholder_json(effect, "/node_id"),
        "url": format!("{}/git/{name}", urls.api),
        "object": {
            "type": "commit",
            "sha": sha,
            "url": format!("{}/git/commits/{sha}", urls.api),
        },
    })
}

impl Adapter for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn plan(&self, call: &Call<'_>) -> Plan {
        let Some(repo) = repo_path(call.path()) else {
            return Plan::default();
        };
        let Some(endpoint) = endpoint(call.method, &repo.rest) else {
            return Plan::default();
        };
        let input = call.json().unwrap_or(Value::Null);
        let slug = format!("{}/{}", repo.owner, repo.repo);
        use ValueKind::{Number, String};
        match endpoint {
            "pulls.create" => Plan::new(
                endpoint,
                format!(
                    "open PR {slug}#? '{}' from {} → {}",
                    excerpt(string_field(&input, "title"), 60),
                    string_field(&input, "head"),
                    string_field(&input, "base")
                ),
                &[
                    ("/number", Number),
                    ("/id", Number),
                    ("/node_id", String),
                    ("/head/sha", String),
                    ("/base/sha", String),
                ],
            ),
            "issues.create" => {
                let labels = label_names(&input);
                let pointers: Vec<(std::string::String, ValueKind)> = (0..labels.len())
                    .flat_map(|i| {
                        [
                            (format!("/labels/{i}/id"), Number),
                            (format!("/labels/{i}/node_id"), String),
                        ]
                    })
                    .collect();
                let mut specs: Vec<(&str, ValueKind)> =
                    vec![("/number", Number), ("/id", Number), ("/node_id", String)];
                specs.extend(pointers.iter().map(|(p, k)| (p.as_str(), *k)));
                Plan::new(
                    endpoint,
                    format!(
                        "open issue {slug}#? '{}'",
                        excerpt(string_field(&input, "title"), 60)
                    ),
                    &specs,
                )
            }
            "issues.comment" => Plan::new(
                endpoint,
                format!(
                    "comment on {slug}#{}: '{}'",
                    repo.rest[1],
                    excerpt(string_field(&input, "body"), 60)
                ),
                &[("/id", Number), ("/node_id", String)],
            ),
            "issues.labels" => {
                let labels = label_names(&input);
                let pointers: Vec<std::string::String> = (0..labels.len())
                    .flat_map(|i| [format!("/{i}/id"), format!("/{i}/node_id")])
                    .collect();
                let specs: Vec<(&str, ValueKind)> = pointers
                    .iter()
                    .map(|p| (p.as_str(), if p.ends_with("/id") { Number } else { String }))
                    .collect();
                Plan::new(
                    endpoint,
                    format!(
                        "add label(s) {} to {slug}#{}",
                        labels.join(", "),
                        repo.rest[1]
                    ),
                    &specs,
                )
            }
            "contents.put" => Plan::new(
                endpoint,
                format!(
                    "{} {slug}:{} on {}: '{}'",
                    if input.get("sha").is_some() {
                        "update"
                    } else {
                        "create"
                    },
                    repo.rest[1..].join("/"),
                    input
                        .get("branch")
                        .and_then(Value::as_str)
                        .unwrap_or("the default branch"),
                    excerpt(string_field(&input, "message"), 60)
                ),
                &[
                    ("/content/sha", String),
                    ("/commit/sha", String),
                    ("/commit/node_id", String),
                ],
            ),
            "releases.create" => Plan::new(
                endpoint,
                format!(
                    "create release {} of {slug}",
                    string_field(&input, "tag_name")
                ),
                &[("/id", Number), ("/node_id", String)],
            ),
            "git.refs.create" => Plan::new(
                endpoint,
                format!(
                    "create ref {} at {} in {slug}",
                    string_field(&input, "ref"),
                    string_field(&input, "sha")
                ),
                &[("/node_id", String)],
            ),
            _ => Plan::default(),
        }
    }

    fn respond(&self, call: &Call<'_>, effect: &Effect) -> Synthetic {
        let Some(repo) = repo_path(call.path()) else {
            return Synthetic::json(202, &json!({}));
        };
        let (status, body) = match endpoint(call.method, &repo.rest) {
            Some("pulls.create") => (201, pull(call, effect, &repo)),
            Some("issues.create") => (201, issue(call, effect, &repo)),
            Some("issues.comment") => (201, comment(call, effect, &repo)),
            Some("issues.labels") => {
                let names = label_names(&call.json().unwrap_or(Value::Null));
                (200, label_objects(&urls(call, &repo), &names, effect, ""))
            }
            Some("contents.put") => {
                let update = call.json().is_some_and(|j| j.get("sha").is_some());
                (
                    if update { 200 } else { 201 },
                    contents(call, effect, &repo),
                )
            }
            Some("releases.create") => (201, release(call, effect, &repo)),
            Some("git.refs.create") => (201, git_ref(call, effect, &repo)),
            _ => (202, json!({})),
        };
        let mut synthetic = Synthetic::json(status, &body);
        if status == 201 {
            if let Some(url) = body.get("url").and_then(Value::as_str) {
                synthetic.headers.push(("location".into(), url.to_owned()));
            }
        }
        synthetic
    }

    fn read_staged(&self, call: &Call<'_>, staged: &[Staged]) -> Option<Synthetic> {
        let repo = repo_path(call.path())?;
        let same_repo = |s: &Staged| {
            s.effect.adapter.as_deref() == Some("github")
                && s.call().authority() == call.authority()
                && repo_path(s.call().path())
                    .is_some_and(|r| r.owner == repo.owner && r.repo == repo.repo)
        };
        let created = |kind: &str, number: &str| {
            staged.iter().find(|s| {
                same_repo(s)
                    && placeholder(&s.effect, "/number") == number
                    && repo_path(s.call().path())
                        .is_some_and(|r| endpoint(&s.effect.method, &r.rest) == Some(kind))
            })
        };
        match repo.rest.as_slice() {
            ["pulls", number] => {
                let s = created("pulls.create", number)?;
                let c = s.call();
                Some(Synthetic::json(
                    200,
                    &pull(&c, &s.effect, &repo_path(c.path())?),
                ))
            }
            ["issues", number] => {
                if let Some(s) = created("issues.create", number) {
                    let c = s.call();
                    return Some(Synthetic::json(
                        200,
                        &issue(&c, &s.effect, &repo_path(c.path())?),
                    ));
                }
                let s = created("pulls.create", number)?;
                let c = s.call();
                let mut as_issue = issue(&c, &s.effect, &repo_path(c.path())?);
                let pr = pull(&c, &s.effect, &repo_path(c.path())?);
                as_issue["pull_request"] = json!({
                    "url": pr["url"], "html_url": pr["html_url"], "diff_url": pr["diff_url"], "patch_url": pr["patch_url"], "merged_at": null,
                });
                Some(Synthetic::json(200, &as_issue))
            }
            ["issues", number, "comments"] => {
                created("issues.create", number).or_else(|| created("pulls.create", number))?;
                let comments: Vec<Value> = staged
                    .iter()
                    .filter(|s| same_repo(s))
                    .filter_map(|s| {
                        let c = s.call();
                        let r = repo_path(c.path())?;
                        (endpoint(&s.effect.method, &r.rest) == Some("issues.comment")
                            && r.rest[1] == *number)
                            .then(|| comment(&c, &s.effect, &r))
                    })
                    .collect();
                Some(Synthetic::json(200, &Value::Array(comments)))
            }
            _ => None,
        }
    }

    fn compensations(&self, call: &Call<'_>, response: &[u8]) -> Vec<Compensation> {
        let Some(repo) = repo_path(call.path()) else {
            return Vec::new();
        };
        let real: Value = serde_json::from_slice(response).unwrap_or(Value::Null);
        let urls = urls(call, &repo);
        let slug = format!("{}/{}", repo.owner, repo.repo);
        let value = |key: &str| {
            real.get(key)
                .map(|v| v.to_string().trim_matches('"').to_owned())
        };
        let json_body = |v: Value| {
            (
                Some("application/json".to_owned()),
                v.to_string().into_bytes(),
            )
        };
        let (method, url, (content_type, body), summary) = match endpoint(call.method, &repo.rest) {
            Some("pulls.create") => {
                let Some(n) = value("number") else {
                    return Vec::new();
                };
                (
                    "PATCH",
                    format!("{}/pulls/{n}", urls.api),
                    json_body(json!({"state": "closed"})),
                    format!("close PR {slug}#{n}"),
                )
            }
            Some("issues.create") => {
                let Some(n) = value("number") else {
                    return Vec::new();
                };
                (
                    "PATCH",
                    format!("{}/issues/{n}", urls.api),
                    json_body(json!({"state": "closed", "state_reason": "not_planned"})),
                    format!("close issue {slug}#{n}"),
                )
            }
            Some("issues.comment") => {
                let Some(id) = value("id") else {
                    return Vec::new();
                };
                (
                    "DELETE",
                    format!("{}/issues/comments/{id}", urls.api),
                    (None, Vec::new()),
                    format!("delete comment {id} on {slug}#{}", repo.rest[1]),
                )
            }
            Some("issues.labels") => {
                let names = label_names(&call.json().unwrap_or(Value::Null));
                return names
                    .iter()
                    .map(|name| Compensation {
                        method: "DELETE".into(),
                        url: format!("{}/issues/{}/labels/{name}", urls.api, repo.rest[1]),
                        content_type: None,
                        body: Vec::new(),
                        summary: format!("remove label {name} from {slug}#{}", repo.rest[1]),
                    })
                    .collect();
            }
            Some("releases.create") => {
                let Some(id) = value("id") else {
                    return Vec::new();
                };
                (
                    "DELETE",
                    format!("{}/releases/{id}", urls.api),
                    (None, Vec::new()),
                    format!("delete release {id} of {slug}"),
                )
            }
            Some("git.refs.create") => {
                let name = string_field(&call.json().unwrap_or(Value::Null), "ref")
                    .trim_start_matches("refs/")
                    .to_owned();
                (
                    "DELETE",
                    format!("{}/git/refs/{name}", urls.api),
                    (None, Vec::new()),
                    format!("delete ref refs/{name} of {slug}"),
                )
            }
            _ => return Vec::new(),
        };
        vec![Compensation {
            method: method.into(),
            url,
            content_type,
            body,
            summary: format!("{summary} (approximate: notifications already went out)"),
        }]
    }
}
