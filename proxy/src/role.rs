//! `airlock serve --role`: which planes one process runs (docs/fleet.md).
//!
//! - [`Role::Proxy`]: the data plane's listeners (`--listen`, `--transparent`, `--dns`, the
//!   fence socket), staging, the journal and lineage. Its `--admin` address is an ops
//!   listener that serves `/healthz` and `/metrics` only; everything else there answers
//!   404 `not_served_by_role`. No admin API, no review UI, no commit authority, no
//!   recovery of releases.
//! - [`Role::Control`]: the admin API, the review UI, the commit authority (release and
//!   its recovery at start, resumed commits), notifications. No proxy, transparent or DNS
//!   listener and no fence socket; sandboxes are told the proxies' address
//!   (`--advertise-proxy`, required).
//! - [`Role::All`] (the default): both, in one process, as before roles existed.
//!
//! Both planes are built in every role (the control plane's handle reads the same store:
//! the proxy answers `review = "auto"` rules and its metrics through it); the role decides
//! what is bound, served and started. Flags that only the other role uses are refused at
//! start ([`check_flags`]) rather than silently ignored.

use std::fmt;

/// What one `airlock serve` process runs (`--role`, env `AIRLOCK_ROLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Role {
    /// The data plane and the control plane in one process (today's single node).
    #[default]
    All,
    /// The data plane only: proxy listeners, staging, journal, lineage; `--admin` serves
    /// `/healthz` and `/metrics` only.
    Proxy,
    /// The control plane only: admin API, review UI, commit authority, notifications,
    /// recovery of releases; no proxy listener.
    Control,
}

impl Role {
    /// The role's name as `--role` takes it: `all`, `proxy` or `control`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Proxy => "proxy",
            Role::Control => "control",
        }
    }

    /// Whether this role binds the data plane's listeners: `--listen`, `--transparent`,
    /// `--dns` and the fence socket.
    pub fn serves_proxy(self) -> bool {
        !matches!(self, Role::Control)
    }

    /// Whether this role is a commit authority: the admin API and review UI on `--admin`,
    /// recovery of interrupted releases at start (`releasing` -> `unknown`), commits
    /// resumed after a restart, workspace decisions resumed, notifications.
    pub fn serves_control(self) -> bool {
        !matches!(self, Role::Proxy)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `airlock serve` flags only the data plane uses: refused with `--role control`.
pub const PROXY_ONLY_FLAGS: &[&str] = &[
    "--listen",
    "--transparent",
    "--dns",
    "--stage-body-limit",
    "--idle-timeout",
    "--max-connections-per-run",
    "--max-connections",
    "--keep-alive-timeout",
    "--max-unauthenticated-connections",
    "--auth-timeout",
    "--body-read-timeout",
    "--dns-queries-per-second",
];

/// `airlock serve` flags only the control plane uses: refused with `--role proxy`.
pub const CONTROL_ONLY_FLAGS: &[&str] = &[
    "--release-timeout",
    "--danger-allow-snapshot-commands",
    "--runner-workspace-root",
    "--workspace-step-timeout",
    "--reviewer-token",
    "--runner-token",
    "--admin-token",
    "--notify-webhook",
    "--ui-base-url",
    "--advertise-proxy",
    "--advertise-ca",
    "--retain",
];

/// A `--role` that does not fit the other flags.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RoleError {
    /// A flag that only the other role uses was given (on the command line or through its
    /// environment variable).
    #[error("{flag} does not apply to --role {role}: {why}; drop it, or run --role all")]
    Misfit {
        /// The flag, `--…`.
        flag: String,
        /// The role given.
        role: Role,
        /// Why the role has no use for it.
        why: &'static str,
    },
    /// `--role control` without `--advertise-proxy`.
    #[error("--role control has no proxy listener, so it cannot tell sandboxes where to connect: pass --advertise-proxy HOST:PORT, the proxies' address (in Kubernetes, the proxy Service)")]
    NoAdvertisedProxy,
}

/// Checks `given`, the `--…` flags set explicitly (command line or environment; not
/// defaults), against `role`: a proxy-only flag with `control` and a control-only flag
/// with `proxy` are refused, and `control` needs `--advertise-proxy`.
///
/// # Errors
/// [`RoleError::Misfit`] naming the first flag that does not fit;
/// [`RoleError::NoAdvertisedProxy`].
pub fn check_flags(role: Role, given: &[String]) -> Result<(), RoleError> {
    let (refused, why): (&[&str], &'static str) = match role {
        Role::All => return Ok(()),
        Role::Proxy => (
            CONTROL_ONLY_FLAGS,
            "a proxy instance has no admin API, review UI or commit authority (the control instances do)",
        ),
        Role::Control => (
            PROXY_ONLY_FLAGS,
            "a control instance has no proxy, transparent or DNS listener (the proxy instances do)",
        ),
    };
    if let Some(flag) = given.iter().find(|flag| refused.contains(&flag.as_str())) {
        return Err(RoleError::Misfit {
            flag: flag.clone(),
            role,
            why,
        });
    }
    if role == Role::Control && !given.iter().any(|flag| flag == "--advertise-proxy") {
        return Err(RoleError::NoAdvertisedProxy);
    }
    Ok(())
}

/// What to tell the operator about `role` on `store` (`--store`'s URL, `None` for the
/// embedded sled ledger in `--data`), or `None` when nothing needs saying.
///
/// `--role proxy` and `--role control` are meant for a fleet on the PostgreSQL store
/// (docs/fleet.md). On the embedded sled ledger they still run, because sled holds its
/// directory for one process: a second instance on the same data directory fails to start
/// naming it ([`crate::StartError::Ledger`]), so nothing can be shared by mistake; a proxy
/// and a control instance can then only take turns on one data directory (the role tests
/// hand a run over that way). Refusing them would protect nothing, so this is a warning.
pub fn store_warning(role: Role, store: Option<&str>) -> Option<String> {
    if role == Role::All || store.is_some() {
        return None;
    }
    Some(format!(
        "--role {role} on the embedded ledger in --data: no other airlock can open it while \
         this one runs, so proxy and control instances can only take turns; give every \
         instance the same --store postgres://… to run them together (docs/fleet.md)"
    ))
}

/// Starts what `role` runs of the control plane and returns the router of its `--admin`
/// address. A commit authority (`control`, `all`) first finishes commits whose decision
/// was written before a restart and resumes workspace decisions, then serves the admin
/// API and the review UI; a proxy serves the ops router (`/healthz`, `/metrics`;
/// [`airlock_control::admin::ops_router`]) and starts nothing. Returns the router and, for
/// control and all roles, the takeover sweeper's task ([`airlock_control::runs::resume_commits`]).
pub fn start_control(
    role: Role,
    control: std::sync::Arc<airlock_control::Control>,
) -> (axum::Router, Option<tokio::task::JoinHandle<()>>) {
    if !role.serves_control() {
        tracing::info!(addr = %control.admin_addr(), "ops listener (--role proxy): /healthz and /metrics only");
        return (airlock_control::admin::ops_router(control), None);
    }
    let sweeper = airlock_control::runs::resume_commits(&control);
    airlock_control::runs::workspace::resume_all(&control);
    tracing::info!(url = %format!("{}/login", control.ui_base_url()), "review UI (sign in with a reviewer token; `airlock ui` prints a sign-in link)");
    (airlock_control::admin::router(control), Some(sweeper))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(list: &[&str]) -> Vec<String> {
        list.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn all_takes_every_flag() {
        let every: Vec<&str> = PROXY_ONLY_FLAGS
            .iter()
            .chain(CONTROL_ONLY_FLAGS)
            .copied()
            .collect();
        assert_eq!(check_flags(Role::All, &flags(&every)), Ok(()));
    }

    #[test]
    fn proxy_refuses_control_flags() {
        let error = check_flags(Role::Proxy, &flags(&["--listen", "--reviewer-token"]));
        assert!(
            matches!(&error, Err(RoleError::Misfit { flag, role: Role::Proxy, .. }) if flag == "--reviewer-token"),
            "{error:?}"
        );
        assert_eq!(
            check_flags(
                Role::Proxy,
                &flags(&["--listen", "--transparent", "--admin"])
            ),
            Ok(())
        );
    }

    #[test]
    fn control_refuses_proxy_flags_and_needs_an_advertised_proxy() {
        let error = check_flags(
            Role::Control,
            &flags(&["--advertise-proxy", "--transparent"]),
        );
        let Err(error) = error else {
            panic!("--transparent was taken with --role control");
        };
        assert!(error
            .to_string()
            .starts_with("--transparent does not apply to --role control"));
        assert_eq!(
            check_flags(Role::Control, &flags(&["--admin"])),
            Err(RoleError::NoAdvertisedProxy)
        );
        assert_eq!(
            check_flags(
                Role::Control,
                &flags(&["--advertise-proxy", "--reviewer-token"])
            ),
            Ok(())
        );
    }
}
