//! Serving a built server: the listeners' accept loops, the addresses file, and graceful shutdown.

use tracing::{info, warn};

use super::{Server, SHUTDOWN_GRACE};
use crate::config::ADDRESSES_FILE;

impl Server {
    /// Serves both listeners until the future is dropped. First writes `addresses.json`
    /// in the data directory, and finishes any commit whose decision was written before a
    /// restart.
    pub async fn run(self) {
        self.run_until(std::future::pending()).await;
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: stops accepting,
    /// waits up to [`SHUTDOWN_GRACE`] for requests in flight (staging included) to be
    /// answered, and flushes the ledger.
    pub async fn run_until(self, shutdown: impl std::future::Future<Output = ()>) {
        let data = self.data.clone();
        tokio::select! {
            () = self.serve() => {}
            () = shutdown => {
                // The accept loops were dropped with `serve`: nothing new is accepted.
                // Connections already accepted run on in their own tasks.
                info!("shutting down: no new connections; waiting for requests in flight");
                let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
                while data.requests_in_flight() > 0 && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let left = data.requests_in_flight();
                if left > 0 {
                    warn!(requests = left, "shutdown grace ran out with requests still in flight");
                }
                match data.ledger().flush() {
                    Ok(()) => info!("ledger flushed; stopped"),
                    Err(error) => warn!(error = %error, "flushing the ledger at shutdown failed"),
                }
            }
        }
    }

    async fn serve(self) {
        let Self {
            role,
            data,
            control,
            proxy,
            admin,
            fence,
            fence_socket,
            transparent,
            dns,
            retain,
            admin_limits,
        } = self;
        let addresses = serde_json::json!({
            "role": role.as_str(),
            "proxy": proxy.as_ref().map(|_| data.proxy_addr().to_string()),
            "admin": format!("http://{}", control.admin_addr()),
            "fence_socket": fence_socket.as_ref().map(|_| control.fence_socket().display().to_string()),
            "transparent": transparent.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()),
            "dns": dns.as_ref().and_then(|(udp, _)| udp.local_addr().ok()).map(|a| a.to_string()),
            "pid": std::process::id(),
        });
        let path = control.data_dir().join(ADDRESSES_FILE);
        if let Err(error) = std::fs::write(&path, format!("{addresses}\n")) {
            warn!(error = %error, path = %path.display(), "cannot write the addresses file");
        }
        info!(role = role.as_str(), proxy = %proxy.as_ref().map_or("none (--role control)".to_owned(), |_| data.proxy_addr().to_string()), admin = %control.admin_addr(),
              policy.revision = data.policy().current().revision(), data = %control.data_dir().display(),
              "airlock listening");
        let _watch = AbortOnDrop(data.policy().watch());
        if let (Some(retain), true) = (retain, role.serves_control()) {
            airlock_control::retention::spawn_retain(&control, retain);
        }
        let admin_stats = control.admin_connections().clone();
        let (router, sweeper) = crate::role::start_control(role, control);
        let _sweeper = sweeper.map(AbortOnDrop);
        let fenced = {
            let (data, fence) = (data.clone(), fence.clone());
            async move {
                if let Some(socket) = fence_socket {
                    airlock_dataplane::fence::serve(data, fence, socket).await;
                }
            }
        };
        let operator = {
            let data = data.clone();
            async move {
                let transparent = async {
                    if let Some(listener) = transparent {
                        info!(addr = ?listener.local_addr().ok(), "transparent listener (--transparent)");
                        airlock_dataplane::fence::operator::serve_transparent(
                            data.clone(),
                            fence.clone(),
                            listener,
                        )
                        .await;
                    }
                };
                let dns = async {
                    if let Some((udp, tcp)) = dns {
                        info!(addr = ?udp.local_addr().ok(), "DNS for source-bound runs (--dns)");
                        airlock_dataplane::fence::operator::serve_dns(
                            data.clone(),
                            fence.clone(),
                            udp,
                            tcp,
                        )
                        .await;
                    }
                };
                tokio::join!(transparent, dns);
            }
        };
        let proxy = async move {
            if let Some(proxy) = proxy {
                airlock_dataplane::listener::serve(data, proxy).await;
            }
        };
        let admin_server =
            airlock_control::admin_listener::serve(router, admin, admin_limits, admin_stats);
        tokio::join!(proxy, admin_server, fenced, operator);
    }
}

/// Aborts a background task when dropped (the policy watcher stops with the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
