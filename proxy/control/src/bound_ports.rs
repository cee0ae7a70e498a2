//! Each run's bound proxy port (see `airlock_dataplane::bound`), opened on first need and
//! named in the run's `JAVA_TOOL_OPTIONS`. Only when sandboxes reach the proxy at its own
//! address: behind `--advertise-proxy` the port would not be reachable where they are.

use std::sync::Arc;

use airlock_ledger::RunId;
use tracing::warn;

use crate::Control;

/// The bound port of `run`, opening it on first use; `None` when the proxy is advertised
/// elsewhere or the port cannot be opened (logged).
pub(crate) async fn java_port(control: &Arc<Control>, run: &RunId) -> Option<u16> {
    let proxy = crate::env::reachable(control.data.proxy_addr());
    if control.advertised.authority() != proxy.to_string() || control.data.is_closed(run) {
        return None;
    }
    {
        let mut ports = control
            .bound_ports
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // A closed run's port closed with it (`serve_bound`).
        ports.retain(|run, _| !control.data.is_closed(run));
        if let Some(port) = ports.get(run) {
            return Some(*port);
        }
    }
    let listener = match tokio::net::TcpListener::bind((proxy.ip(), 0)).await {
        Ok(listener) => listener,
        Err(error) => {
            warn!(run.id = %run, error = %error, "cannot open the run's bound proxy port");
            return None;
        }
    };
    let port = listener.local_addr().ok()?.port();
    control
        .bound_ports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(run.clone(), port);
    tokio::spawn(airlock_dataplane::bound::serve_bound(
        control.data.clone(),
        run.clone(),
        listener,
    ));
    Some(port)
}
