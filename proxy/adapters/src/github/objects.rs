//! The documented GitHub REST objects of staged writes
//! (<https://docs.github.com/en/rest>): every always-present field, placeholders where
//! only GitHub assigns a value, URLs built from them.

use airlock_ledger::Effect;
use serde_json::{json, Value};

use super::super::{placeholder, placeholder_json, rfc3339, Call};
use super::RepoPath;

/// Base URLs of one repository: API and HTML.
pub(super) struct Urls {
    pub(super) api: String,
    pub(super) html: String,
    pub(super) api_root: String,
}

pub(super) fn urls(call: &Call<'_>, repo: &RepoPath<'_>) -> Urls {
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
pub(super) fn user(api_root: &str) -> Value {
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

pub(super) fn string_field<'v>(json: &'v Value, key: &str) -> &'v str {
    json.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn label_names(json: &Value) -> Vec<String> {
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

pub(super) fn label_objects(
    urls: &Urls,
    names: &[String],
    effect: &Effect,
    pointer_prefix: &str,
) -> Value {
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
pub(super) fn issue(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
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
pub(super) fn pull(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
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
pub(super) fn comment(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
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

pub(super) fn contents(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
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

pub(super) fn release(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
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

pub(super) fn git_ref(call: &Call<'_>, effect: &Effect, repo: &RepoPath<'_>) -> Value {
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
