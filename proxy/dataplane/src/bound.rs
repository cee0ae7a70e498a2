//! Run-bound proxy ports: a listener whose every connection belongs to one run, with no
//! `Proxy-Authorization`, for clients that cannot send proxy credentials from the
//! environment. The JDK is one: `java.net.http.HttpClient` honours `https.proxyHost` and
//! `https.proxyPort` but never `http.proxyUser`/`proxyPassword` (those are Apache
//! HttpClient's convention), so `JAVA_TOOL_OPTIONS` names the run's bound port instead
//! (docs/containment.md, "env mode and Java").
//!
//! The port is a capability: any local process that connects acts as the run. It listens
//! on the proxy listener's address and closes when the run closes.

use std::sync::Arc;
use std::time::Duration;

use airlock_ledger::RunId;
use tokio::net::TcpListener;
use tracing::{debug, info_span, Instrument};

use crate::DataPlane;

/// How often a bound listener checks whether its run closed.
const CLOSED_POLL: Duration = Duration::from_secs(1);

/// Serves `listener` for `run` until the run closes.
pub async fn serve_bound(shared: Arc<DataPlane>, run: RunId, listener: TcpListener) {
    // No run may reach another's bound port through the proxy (invariant 1's own-listener
    // refusal covers it from the moment it listens).
    let own = listener.local_addr().ok();
    if let Some(addr) = own {
        shared.dialer.add_own(addr);
    }
    loop {
        if shared.is_closed(&run) {
            debug!(run.id = %run, "the run closed; its bound proxy port closes");
            if let Some(addr) = own {
                shared.dialer.remove_own(addr);
            }
            return;
        }
        let accepted = tokio::time::timeout(CLOSED_POLL, listener.accept()).await;
        let Ok(Ok((stream, peer))) = accepted else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let guard = match shared.connections.open() {
            Ok(guard) => guard,
            Err(cap) => {
                tokio::spawn(crate::listener::refuse_connection(stream, cap));
                continue;
            }
        };
        let span = info_span!("bound", client.addr = %peer, run.id = %run);
        let stream = airlock_net::linger::Lingering::new(stream);
        tokio::spawn(
            crate::listener::serve_connection(shared.clone(), stream, guard, Some(run.clone()))
                .instrument(span),
        );
    }
}
