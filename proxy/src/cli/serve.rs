//! `airlock serve`: builds the server from the flags and runs it until Ctrl-C or SIGTERM.

use super::args::ServeArgs;
use crate::config::ServeConfig;

/// `airlock serve`: the flags become a [`ServeConfig`]; runs until [`shutdown_signal`].
pub(super) async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = ServeConfig::new(args.data, args.policy);
    config.listen = args.listen;
    config.admin = args.admin;
    config.upstream_ca = args.upstream_ca;
    config.stage_body_limit = args.stage_body_limit;
    config.header_read_timeout = std::time::Duration::from_secs(args.header_read_timeout.max(1));
    config.release_timeout = std::time::Duration::from_secs(args.release_timeout.max(1));
    config.danger_allow_snapshot_commands = args.danger_allow_snapshot_commands;
    config.workspace_step_timeout =
        std::time::Duration::from_secs(args.workspace_step_timeout.max(1));
    config.resolve = args.resolve;
    config.advertise_proxy = args.advertise_proxy;
    config.transparent = args.transparent;
    config.dns = args.dns;
    config.advertise_ca = args.advertise_ca;
    config.baseline_path = args.baseline;
    config.reviewer_tokens = args.reviewer_tokens;
    config.notify_webhook = args.notify_webhook;
    config.ui_base_url = args.ui_base_url;
    config.idle_timeout = std::time::Duration::from_secs(args.idle_timeout.max(1));
    config.max_connections_per_run = args.max_connections_per_run;
    config.max_connections = args.max_connections;
    config.keep_alive_timeout = std::time::Duration::from_secs(args.keep_alive_timeout.max(1));
    config.max_unauthenticated_connections = args.max_unauthenticated_connections;
    config.auth_timeout = std::time::Duration::from_secs(args.auth_timeout.max(1));
    config.body_read_timeout = std::time::Duration::from_secs(args.body_read_timeout.max(1));
    config.ledger_cache_bytes = args.ledger_cache_mib << 20;
    config.ledger_min_free_bytes = args.ledger_min_free_mib << 20;
    config.store_url = args.store;
    config.store_connections = args.store_connections;
    airlock_net::limits::raise_fd_limit(config.max_connections);
    let server = crate::Server::build(config).await?;
    server.run_until(shutdown_signal()).await;
    Ok(())
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
