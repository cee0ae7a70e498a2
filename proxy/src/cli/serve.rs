//! `airlock serve`: checks the flags fit `--role`, builds the server from them and runs it
//! until Ctrl-C or SIGTERM.

use super::args::ServeArgs;
use crate::config::ServeConfig;

/// `airlock serve`: the flags become a [`ServeConfig`]; runs until [`shutdown_signal`].
pub(super) async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    crate::role::check_flags(args.role, &args.given)?;
    if let Some(warning) = crate::role::store_warning(args.role, args.store.as_deref()) {
        tracing::warn!("{warning}");
    }
    let mut config = ServeConfig::new(args.data, args.policy);
    config.role = args.role;
    config.listen = args.listen;
    config.admin = args.admin;
    config.upstream_ca = args.upstream_ca;
    config.stage_body_limit = args.stage_body_limit;
    config.header_read_timeout = std::time::Duration::from_secs(args.header_read_timeout.max(1));
    config.release_timeout = std::time::Duration::from_secs(args.release_timeout.max(1));
    config.release_lease_ttl = std::time::Duration::from_secs(args.release_lease_ttl);
    config.danger_allow_snapshot_commands = args.danger_allow_snapshot_commands;
    config.runner_workspace_roots = args.runner_workspace_roots;
    config.workspace_step_timeout =
        std::time::Duration::from_secs(args.workspace_step_timeout.max(1));
    config.resolve = args.resolve;
    config.advertise_proxy = args.advertise_proxy;
    config.transparent = args.transparent;
    config.dns = args.dns;
    config.advertise_ca = args.advertise_ca;
    config.baseline_path = args.baseline;
    config.tokens = [
        args.admin_tokens,
        args.runner_tokens,
        args.reviewer_tokens,
        args.viewer_tokens,
    ]
    .concat();
    config.notify_webhook = args.notify_webhook;
    config.ui_base_url = args.ui_base_url;
    config.idle_timeout = std::time::Duration::from_secs(args.idle_timeout.max(1));
    config.max_connections_per_run = args.max_connections_per_run;
    config.max_connections = args.max_connections;
    config.admin_max_connections = args.admin_max_connections;
    config.dns_queries_per_second = args.dns_queries_per_second;
    config.keep_alive_timeout = std::time::Duration::from_secs(args.keep_alive_timeout.max(1));
    config.max_unauthenticated_connections = args.max_unauthenticated_connections;
    config.auth_timeout = std::time::Duration::from_secs(args.auth_timeout.max(1));
    config.body_read_timeout = std::time::Duration::from_secs(args.body_read_timeout.max(1));
    config.ledger_cache_bytes = args.ledger_cache_mib << 20;
    config.ledger_min_free_bytes = args.ledger_min_free_mib << 20;
    config.retain = args.retain.map(Into::into);
    config.store_url = args.store;
    config.store_connections = args.store_connections;
    airlock_net::limits::raise_fd_limit(config.max_connections);
    let fresh = FreshDataDir::before(&config.data_dir);
    let server = fresh.build(config).await?;
    server.run_until(shutdown_signal()).await;
    Ok(())
}

/// The part of a data directory path that does not exist yet, so a server that fails to
/// start removes what this attempt created (its CA, tokens, ledger) and nothing else: a
/// data directory that existed before is never touched.
pub(super) struct FreshDataDir(Option<std::path::PathBuf>);

impl FreshDataDir {
    /// Notes the outermost missing directory of `data` (none when `data` exists).
    pub(super) fn before(data: &std::path::Path) -> Self {
        let data = std::path::absolute(data).unwrap_or_else(|_| data.to_path_buf());
        let missing = data
            .ancestors()
            .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
            .last()
            .map(std::path::Path::to_path_buf);
        Self(missing)
    }

    /// Builds the server; when that fails, removes the directories this attempt created.
    pub(super) async fn build(
        self,
        config: ServeConfig,
    ) -> Result<crate::Server, crate::StartError> {
        let built = crate::Server::build(config).await;
        if built.is_err() {
            if let Some(created) = &self.0 {
                if let Err(error) = std::fs::remove_dir_all(created) {
                    tracing::warn!(path = %created.display(), error = %error,
                        "could not remove the data directory this failed start created");
                }
            }
        }
        built
    }
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::warn!(error = %error, "cannot listen for SIGTERM");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
