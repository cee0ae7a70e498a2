//! The route table: every route the admin listener answers, with who may call it and the
//! name its calls are audited under. The admin API's and the review UI's role checks look
//! the matched route up here, and a route missing from the table is refused to everyone
//! (403 `route_without_role`), so no endpoint can be added without saying who may call
//! it; the tests compare this table with the router and the OpenAPI document, and
//! docs/admin-api.md's role table is [`markdown`]'s output.

use axum::http::Method;

use super::{Action, Role};

/// How a route is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No credentials: health, the OpenAPI document, the sign-in page, the UI's assets.
    Public,
    /// A bearer token (the admin API) whose role may take the action.
    Token(Action),
    /// A review-UI session whose role may take the action.
    Session(Action),
}

impl Access {
    /// The action, when the route needs credentials.
    pub fn action(self) -> Option<Action> {
        match self {
            Self::Public => None,
            Self::Token(action) | Self::Session(action) => Some(action),
        }
    }
}

/// One route: method, path template (axum's, `{id}` for a segment), access, and the
/// audit name of its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: &'static str,
    /// The path template.
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// The `action` of its audit entries (`approve`, `commit`, `policy_reload`…).
    pub name: &'static str,
}

impl Route {
    /// Whether each call is written to the audit log: every call that changes state, and
    /// reading a run's proxy token (`GET /v1/runs/{id}/env`).
    pub fn audited(&self) -> bool {
        match self.access {
            Access::Public => false,
            Access::Token(action) | Access::Session(action) => {
                (self.method != "GET" && self.name != "sign_out") || action == Action::RunEnv
            }
        }
    }
}

const fn token(
    method: &'static str,
    path: &'static str,
    action: Action,
    name: &'static str,
) -> Route {
    Route {
        method,
        path,
        access: Access::Token(action),
        name,
    }
}

const fn session(
    method: &'static str,
    path: &'static str,
    action: Action,
    name: &'static str,
) -> Route {
    Route {
        method,
        path,
        access: Access::Session(action),
        name,
    }
}

const fn public(method: &'static str, path: &'static str) -> Route {
    Route {
        method,
        path,
        access: Access::Public,
        name: "public",
    }
}

/// Every route of the admin listener (docs/admin-api.md#roles).
pub const ROUTES: &[Route] = &[
    public("GET", "/healthz"),
    public("GET", "/v1/openapi.json"),
    public("GET", "/login"),
    public("POST", "/login"),
    public("GET", "/ui/ui.css"),
    public("GET", "/ui/ui.js"),
    token("GET", "/metrics", Action::Metrics, "read"),
    token("GET", "/v1/ca", Action::Read, "read"),
    token("GET", "/v1/audit", Action::ReadAudit, "read"),
    token("POST", "/v1/runs", Action::CreateRun, "create_run"),
    token("GET", "/v1/runs", Action::Read, "read"),
    token("GET", "/v1/runs/{id}", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/effects", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/reads", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/denials", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/lineage", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/fence", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/export", Action::Read, "read"),
    token("GET", "/v1/runs/{id}/env", Action::RunEnv, "read_env"),
    token("POST", "/v1/runs/{id}/seal", Action::Seal, "seal"),
    token("POST", "/v1/runs/{id}/abort", Action::Abort, "abort"),
    token("POST", "/v1/runs/{id}/commit", Action::Commit, "commit"),
    token("GET", "/v1/runs/{id}/workspace", Action::Read, "read"),
    token(
        "POST",
        "/v1/runs/{id}/workspace",
        Action::Workspace,
        "workspace_attach",
    ),
    token(
        "POST",
        "/v1/runs/{id}/workspace/steps",
        Action::Workspace,
        "workspace_step",
    ),
    token(
        "POST",
        "/v1/runs/{id}/workspace/decide",
        Action::Workspace,
        "workspace_decide",
    ),
    token(
        "POST",
        "/v1/runs/{id}/workspace/resume",
        Action::Workspace,
        "workspace_resume",
    ),
    token(
        "POST",
        "/v1/runs/{id}/savepoints",
        Action::Workspace,
        "savepoint",
    ),
    token(
        "POST",
        "/v1/runs/{id}/rollback-to",
        Action::Workspace,
        "rollback_to",
    ),
    token(
        "POST",
        "/v1/runs/{id}/compensate",
        Action::Outcomes,
        "compensate",
    ),
    token("POST", "/v1/runs/{id}/retry", Action::Outcomes, "retry_run"),
    token("POST", "/v1/runs/{id}/prune", Action::Prune, "prune"),
    token("POST", "/v1/runs/prune", Action::Prune, "prune_finished"),
    token("GET", "/v1/effects/{id}", Action::Read, "read"),
    token(
        "POST",
        "/v1/effects/{id}/approve",
        Action::Decide,
        "approve",
    ),
    token("POST", "/v1/effects/{id}/reject", Action::Decide, "reject"),
    token("POST", "/v1/effects/{id}/retry", Action::Outcomes, "retry"),
    token(
        "POST",
        "/v1/effects/{id}/settle",
        Action::Outcomes,
        "settle",
    ),
    token("GET", "/v1/policy", Action::Read, "read"),
    token("POST", "/v1/policy", Action::PolicyReload, "policy_reload"),
    token(
        "POST",
        "/v1/runs/{id}/flows/replay",
        Action::Read,
        "flow_replay",
    ),
    token(
        "POST",
        "/v1/ui/sign-in-links",
        Action::OwnSignInLink,
        "sign_in_link",
    ),
    session("GET", "/", Action::Read, "read"),
    session("GET", "/runs/{id}", Action::Read, "read"),
    session("GET", "/runs/{id}/commit", Action::Read, "read"),
    session("POST", "/runs/{id}/commit", Action::Commit, "commit"),
    session("POST", "/runs/{id}/abort", Action::Abort, "abort"),
    session(
        "POST",
        "/runs/{id}/approve-rule",
        Action::Decide,
        "approve_rule",
    ),
    session("GET", "/effects/{id}", Action::Read, "read"),
    session("POST", "/effects/{id}/approve", Action::Decide, "approve"),
    session("POST", "/effects/{id}/reject", Action::Decide, "reject"),
    session("POST", "/logout", Action::Read, "sign_out"),
];

/// The route `method` on the matched path template `path`, if the table declares it.
pub fn lookup(method: &Method, path: &str) -> Option<&'static Route> {
    // HEAD is answered by the GET route (axum runs GET handlers for HEAD).
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTES.iter().find(|r| r.method == method && r.path == path)
}

/// The methods the table declares for the path template `template` (empty when it
/// declares none), for a 405's `Allow`.
pub fn methods_of(template: &str) -> Vec<&'static str> {
    ROUTES
        .iter()
        .filter(|r| r.path == template)
        .map(|r| r.method)
        .collect()
}

/// The route a concrete `path` (`/runs/run_…/abort`) with `method` is answered by: the
/// entry whose template matches it segment by segment, `{id}` matching any one segment
/// and literal segments preferred (`/v1/runs/prune` over `/v1/runs/{id}`).
pub fn matching(method: &str, path: &str) -> Option<&'static Route> {
    let segments: Vec<&str> = path.split('/').collect();
    let fits = |route: &&Route| {
        let template: Vec<&str> = route.path.split('/').collect();
        route.method == method
            && template.len() == segments.len()
            && template
                .iter()
                .zip(&segments)
                .all(|(t, s)| t == s || (*t == "{id}" && !s.is_empty()))
    };
    let wildcards = |route: &&Route| route.path.matches("{id}").count();
    ROUTES.iter().filter(fits).min_by_key(wildcards)
}

/// The run or effect a call is about, from its path: the `{id}` segment of a
/// `…/runs/{id}…` or `…/effects/{id}…` template, taken from the path that matched it.
pub fn subject(template: &str, path: &str) -> (Option<String>, Option<String>) {
    let (mut run, mut effect) = (None, None);
    let mut previous = "";
    for (pattern, segment) in template.split('/').zip(path.split('/')) {
        if pattern == "{id}" {
            // As the handler's `Path` extractor sees it: percent-decoded.
            let decoded = percent_decode(segment);
            match previous {
                "runs" => run = Some(decoded),
                "effects" => effect = Some(decoded),
                _ => {}
            }
        }
        previous = pattern;
    }
    (run, effect)
}

/// `segment` with its `%XX` escapes decoded (RFC 3986 §2.1) by the crate axum's `Path`
/// extractor decodes with, so the audit names what the handler acted on; bytes that are
/// not UTF-8 leave the segment as it is.
fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .unwrap_or_else(|_| segment.to_owned())
}

/// docs/admin-api.md's role table: one row per route with credentials, a column per
/// role (`✓` where it may call the route).
pub fn markdown() -> String {
    let mut out = String::from("| method | path | action | admin | runner | reviewer | viewer |\n");
    out.push_str("|---|---|---|:-:|:-:|:-:|:-:|\n");
    for route in ROUTES {
        let (kind, action) = match route.access {
            Access::Public => continue,
            Access::Token(action) => ("", action),
            Access::Session(action) => (" (UI)", action),
        };
        let marks: Vec<&str> = Role::ALL
            .iter()
            .map(|role| if role.may(action) { "✓" } else { "" })
            .collect();
        out.push_str(&format!(
            "| {} | `{}`{kind} | {} | {} |\n",
            route.method,
            route.path,
            action.as_str(),
            marks.join(" | ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_declared_once() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(
                    (a.method, a.path) != (b.method, b.path),
                    "{} {} is declared twice",
                    a.method,
                    a.path
                );
            }
        }
    }

    #[test]
    fn concrete_paths_find_their_route() {
        let route = matching("POST", "/runs/run_1/abort").expect("declared");
        assert_eq!(route.access, Access::Session(Action::Abort));
        let route = matching("POST", "/v1/runs/prune").expect("declared");
        assert_eq!(route.name, "prune_finished");
        assert!(matching("POST", "/runs/run_1/nothing").is_none());
    }

    #[test]
    fn the_subject_comes_from_the_id_segment() {
        assert_eq!(
            subject("/v1/runs/{id}/seal", "/v1/runs/run_1/seal"),
            (Some("run_1".into()), None)
        );
        assert_eq!(
            subject("/effects/{id}/approve", "/effects/eff_2/approve"),
            (None, Some("eff_2".into()))
        );
        assert_eq!(subject("/v1/runs/prune", "/v1/runs/prune"), (None, None));
        assert_eq!(
            subject("/v1/runs/{id}/commit", "/v1/runs/run_%301M9/commit"),
            (Some("run_01M9".into()), None),
            "decoded as the handler decodes it"
        );
    }

    #[test]
    fn docs_admin_api_holds_the_generated_role_table() {
        let doc = include_str!("../../../../docs/admin-api.md");
        assert!(
            doc.contains(&markdown()),
            "docs/admin-api.md's role table is out of date; replace it with:\n{}",
            markdown()
        );
    }
}
