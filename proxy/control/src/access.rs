//! Who may do what on the admin listener: the four roles (docs/admin-api.md#roles), the
//! actions each route takes ([`routes::ROUTES`], the one table every admin route and
//! review-UI route is declared in), and the named tokens a server knows.
//!
//! A token is held only as its SHA-256 digest, compared in constant time; the review UI's
//! session cookies are keyed by that digest ([`crate::ui::session`]), so the token itself is
//! not kept in memory once it is read.

use std::path::PathBuf;

use sha2::{Digest as _, Sha256};

pub mod audit;
pub mod routes;

/// A role: the set of [`Action`]s its tokens may take ([`Role::may`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything: policy reload, prune, workspace drivers (the `cmd` driver above all),
    /// run tokens, sign-in links for others.
    Admin,
    /// What `airlock run` and an orchestrator need: create runs, read their `env`, drive
    /// their workspace, seal and abort. Never approve, reject or commit: the party that
    /// starts the agent does not approve its effects.
    Runner,
    /// Read runs, effects, reads, lineage, flows and the audit log; approve, reject, seal,
    /// commit, abort, retry, settle, compensate; its own sign-in link.
    Reviewer,
    /// Read only.
    Viewer,
}

impl Role {
    /// Every role, most powerful first.
    pub const ALL: [Role; 4] = [Role::Admin, Role::Runner, Role::Reviewer, Role::Viewer];

    /// The role's name: `admin`, `runner`, `reviewer`, `viewer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Runner => "runner",
            Self::Reviewer => "reviewer",
            Self::Viewer => "viewer",
        }
    }

    /// Whether tokens of this role may take `action`: the one place the roles are defined.
    pub fn may(self, action: Action) -> bool {
        use Action::*;
        match self {
            Self::Admin => true,
            Self::Runner => matches!(
                action,
                Read | Metrics | CreateRun | RunEnv | Workspace | Seal | Abort
            ),
            Self::Reviewer => matches!(
                action,
                Read | Metrics
                    | ReadAudit
                    | Seal
                    | Abort
                    | Decide
                    | Commit
                    | Outcomes
                    | OwnSignInLink
            ),
            Self::Viewer => matches!(action, Read | Metrics | ReadAudit | OwnSignInLink),
        }
    }

    /// The roles that may take `action`, most powerful first.
    pub fn allowed(action: Action) -> Vec<Role> {
        Self::ALL.into_iter().filter(|r| r.may(action)).collect()
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a route does, for the role check ([`Role::may`]) and the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Read runs, effects, reads, lineage, denials, flows, the fence, the workspace, the
    /// policy in force, the CA, an export.
    Read,
    /// Scrape `/metrics`.
    Metrics,
    /// Read the audit log.
    ReadAudit,
    /// Create a run.
    CreateRun,
    /// Read a run's proxy token and environment (`/v1/runs/{id}/env`).
    RunEnv,
    /// Attach, snapshot, savepoint, roll back or decide a run's workspace (a decision
    /// that commits needs [`Action::Commit`] too; `--approve-all` needs
    /// [`Action::Decide`]).
    Workspace,
    /// Attach a workspace with the `cmd` driver, which runs the server's commands as the
    /// server's user.
    WorkspaceCommand,
    /// Seal a run.
    Seal,
    /// Abort a run.
    Abort,
    /// Approve or reject effects.
    Decide,
    /// Commit a run.
    Commit,
    /// Retry, settle or compensate released effects.
    Outcomes,
    /// Replace the policy.
    PolicyReload,
    /// Prune finished runs.
    Prune,
    /// A one-time review-UI sign-in link for one's own token.
    OwnSignInLink,
    /// A sign-in link for another token's holder.
    SignInLinkForOthers,
}

impl Action {
    /// The stable snake_case name (`create_run`, `decide`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Metrics => "metrics",
            Self::ReadAudit => "read_audit",
            Self::CreateRun => "create_run",
            Self::RunEnv => "run_env",
            Self::Workspace => "workspace",
            Self::WorkspaceCommand => "workspace_command",
            Self::Seal => "seal",
            Self::Abort => "abort",
            Self::Decide => "decide",
            Self::Commit => "commit",
            Self::Outcomes => "outcomes",
            Self::PolicyReload => "policy_reload",
            Self::Prune => "prune",
            Self::OwnSignInLink => "own_sign_in_link",
            Self::SignInLinkForOthers => "sign_in_link_for_others",
        }
    }
}

/// Someone the server knows by a token: a name, a role, the token's digest.
#[derive(Clone, PartialEq, Eq)]
pub struct Principal {
    /// The name recorded with the holder's actions (`admin` for `DATA/admin.token`).
    pub name: String,
    /// What the holder may do.
    pub role: Role,
    /// SHA-256 of the token.
    digest: [u8; 32],
}

impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Principal {
    /// A principal named `name` in `role` holding `token`.
    pub fn new(name: impl Into<String>, role: Role, token: &str) -> Self {
        Self {
            name: name.into(),
            role,
            digest: Sha256::digest(token.trim().as_bytes()).into(),
        }
    }

    /// The key this principal's review-UI sessions are signed with: the token's digest
    /// (replacing the token ends its sessions).
    pub fn session_key(&self) -> &[u8] {
        &self.digest
    }

    /// Whether `presented` is this principal's token, compared in constant time.
    pub fn holds(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        digest
            .iter()
            .zip(&self.digest)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }

    /// `Ok` when this principal's role may take `action`, else the 403 that says which
    /// roles may.
    ///
    /// Errors: [`Forbidden`].
    pub fn require(&self, action: Action) -> Result<(), Forbidden> {
        if self.role.may(action) {
            Ok(())
        } else {
            Err(Forbidden {
                name: self.name.clone(),
                role: self.role,
                action,
            })
        }
    }
}

/// A principal's role may not take an action: HTTP 403 `forbidden_for_role`, with
/// `{role, needed}` in the error's `details`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} has the {role} role, which may not {what}; it needs the {needed} role", what = describe(*action), needed = needed(*action))]
pub struct Forbidden {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The action refused.
    pub action: Action,
}

fn needed(action: Action) -> String {
    let names: Vec<&str> = Role::allowed(action).iter().map(|r| r.as_str()).collect();
    names.join(" or ")
}

/// What an action is, in words, for the 403's message.
fn describe(action: Action) -> &'static str {
    match action {
        Action::Read => "read runs",
        Action::Metrics => "read the metrics",
        Action::ReadAudit => "read the audit log",
        Action::CreateRun => "create runs",
        Action::RunEnv => "read a run's proxy token and environment",
        Action::Workspace => "drive a run's workspace",
        Action::WorkspaceCommand => "attach a workspace with the cmd driver",
        Action::Seal => "seal runs",
        Action::Abort => "abort runs",
        Action::Decide => "approve or reject effects",
        Action::Commit => "commit runs",
        Action::Outcomes => "retry, settle or compensate effects",
        Action::PolicyReload => "replace the policy",
        Action::Prune => "prune runs",
        Action::OwnSignInLink => "ask for a sign-in link",
        Action::SignInLinkForOthers => "make sign-in links for others",
    }
}

impl Forbidden {
    /// The roles that may take the refused action.
    pub fn needed(&self) -> Vec<Role> {
        Role::allowed(self.action)
    }
}

/// Errors reading the named tokens at start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// `NAME=FILE` is malformed.
    #[error("--{flag} {text:?} is not NAME=FILE (NAME: letters, digits, '-', '_', '.')")]
    Syntax {
        /// The flag (`reviewer-token`…).
        flag: &'static str,
        /// What was given.
        text: String,
    },
    /// The file cannot be read.
    #[error("--{flag} {name}={path}: cannot read the token file")]
    Read {
        /// The flag.
        flag: &'static str,
        /// The name.
        name: String,
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The token is empty or too short to be a secret.
    #[error("--{flag} {name}={path}: the token is shorter than 16 characters (the file is empty or holds no secret)")]
    Short {
        /// The flag.
        flag: &'static str,
        /// The name.
        name: String,
        /// The file.
        path: String,
    },
    /// Two tokens share a name or a token.
    #[error("--{flag} {name}: the name is given twice, or the token is another name's too")]
    Duplicate {
        /// The flag.
        flag: &'static str,
        /// The name.
        name: String,
    },
}

/// A named token file of one role, as the flags give it (`--reviewer-token NAME=FILE`…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    /// The role.
    pub role: Role,
    /// The name.
    pub name: String,
    /// The file holding the token (surrounding whitespace ignored).
    pub path: PathBuf,
}

/// The flag of `role`'s named tokens: `admin-token`, `runner-token`, `reviewer-token`,
/// `viewer-token`.
pub fn flag_of(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin-token",
        Role::Runner => "runner-token",
        Role::Reviewer => "reviewer-token",
        Role::Viewer => "viewer-token",
    }
}

/// Parses `NAME=FILE` of a `--ROLE-token` flag.
///
/// Errors: [`TokenError::Syntax`] for a missing `=`, an empty file, or a name that is
/// empty, longer than 64 characters or holds other than ASCII letters, digits, `-_.`.
pub fn parse_token_arg(role: Role, text: &str) -> Result<TokenFile, TokenError> {
    let syntax = || TokenError::Syntax {
        flag: flag_of(role),
        text: text.to_owned(),
    };
    let (name, file) = text.split_once('=').ok_or_else(syntax)?;
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !file.is_empty();
    if !valid {
        return Err(syntax());
    }
    Ok(TokenFile {
        role,
        name: name.to_owned(),
        path: PathBuf::from(file),
    })
}

/// The principals of a server: `admin` (role admin) with the admin token, then each named
/// token file.
///
/// Errors: an unreadable file, a token under 16 characters, a repeated name or token
/// ([`TokenError`], naming the flag and the file).
pub fn load_principals(
    admin_token: &str,
    named: &[TokenFile],
) -> Result<Vec<Principal>, TokenError> {
    let mut principals = vec![Principal::new("admin", Role::Admin, admin_token)];
    for file in named {
        let flag = flag_of(file.role);
        let token = std::fs::read_to_string(&file.path)
            .map_err(|source| TokenError::Read {
                flag,
                name: file.name.clone(),
                path: file.path.display().to_string(),
                source,
            })?
            .trim()
            .to_owned();
        if token.len() < 16 {
            return Err(TokenError::Short {
                flag,
                name: file.name.clone(),
                path: file.path.display().to_string(),
            });
        }
        if principals
            .iter()
            .any(|p| p.name == file.name || p.holds(&token))
        {
            return Err(TokenError::Duplicate {
                flag,
                name: file.name.clone(),
            });
        }
        principals.push(Principal::new(file.name.clone(), file.role, &token));
    }
    Ok(principals)
}

/// The principal whose token `presented` is; every principal is compared, in constant
/// time each.
pub fn principal_for_token<'a>(
    principals: &'a [Principal],
    presented: &str,
) -> Option<&'a Principal> {
    let mut found = None;
    for principal in principals {
        if principal.holds(presented) {
            found = Some(principal);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_never_decide_or_commit_and_viewers_only_read() {
        for action in [
            Action::Decide,
            Action::Commit,
            Action::PolicyReload,
            Action::Prune,
        ] {
            assert!(!Role::Runner.may(action), "{action:?}");
        }
        for action in [
            Action::CreateRun,
            Action::RunEnv,
            Action::Workspace,
            Action::Seal,
        ] {
            assert!(Role::Runner.may(action), "{action:?}");
        }
        for action in [
            Action::PolicyReload,
            Action::Prune,
            Action::RunEnv,
            Action::CreateRun,
            Action::WorkspaceCommand,
            Action::SignInLinkForOthers,
        ] {
            assert!(!Role::Reviewer.may(action), "{action:?}");
        }
        let viewer: Vec<Action> = [
            Action::Read,
            Action::Metrics,
            Action::ReadAudit,
            Action::Seal,
            Action::Decide,
            Action::CreateRun,
        ]
        .into_iter()
        .filter(|a| Role::Viewer.may(*a))
        .collect();
        assert_eq!(viewer, [Action::Read, Action::Metrics, Action::ReadAudit]);
    }

    #[test]
    fn a_forbidden_action_names_the_roles_needed() {
        let bob = Principal::new("bob", Role::Runner, "0123456789abcdef0123");
        let refused = bob
            .require(Action::Commit)
            .expect_err("a runner cannot commit");
        assert_eq!(refused.needed(), [Role::Admin, Role::Reviewer]);
        assert_eq!(
            refused.to_string(),
            "bob has the runner role, which may not commit runs; it needs the admin or reviewer role"
        );
        assert!(bob.holds(" 0123456789abcdef0123\n"));
        assert!(!bob.holds("0123456789abcdef012"));
    }
}
