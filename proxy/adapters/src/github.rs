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

use super::{excerpt, placeholder, Adapter, Call, Compensation, Plan, Staged, Synthetic};

mod lists;
mod objects;

use objects::{
    comment, contents, git_ref, issue, label_names, label_objects, pull, release, string_field,
    urls,
};

/// The GitHub REST adapter.
#[derive(Debug, Clone, Copy)]
pub struct GitHub;

/// A request path under `/repos/{owner}/{repo}/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RepoPath<'a> {
    /// What precedes `/repos/` (empty on api.github.com, `/api/v3` on GitHub Enterprise).
    pub(super) prefix: &'a str,
    pub(super) owner: &'a str,
    pub(super) repo: &'a str,
    /// The segments after the repository.
    pub(super) rest: Vec<&'a str>,
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
                    ("/head/sha", ValueKind::Sha1),
                    ("/base/sha", ValueKind::Sha1),
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
                    ("/content/sha", ValueKind::Sha1),
                    ("/commit/sha", ValueKind::Sha1),
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
                Some(Synthetic::json(
                    200,
                    &lists::pull_as_issue(&c, s, &repo_path(c.path())?),
                ))
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

    fn lists_staged(&self, method: &str, url: &str) -> bool {
        lists::is_list(method, url)
    }

    fn merge_list(
        &self,
        call: &Call<'_>,
        link: Option<&str>,
        page: &[u8],
        staged: &[Staged],
    ) -> Option<(Vec<u8>, usize)> {
        lists::merge(call, link, page, staged)
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
