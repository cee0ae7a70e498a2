//! Fences operators build themselves (docs/containment.md, "Your own fence"): `airlock
//! serve --transparent ADDR` takes connections their nftables redirect to it, and `--dns
//! ADDR` answers their DNS. A connection or query belongs to the open run whose `source`
//! holds its source address; one from no bound source is refused (closed, or `REFUSED`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tracing::{debug, info_span, warn, Instrument};

use super::Fence;
use crate::DataPlane;

/// Accepts redirected connections on `listener` until the task is dropped.
pub async fn serve_transparent(shared: Arc<DataPlane>, fence: Arc<Fence>, listener: TcpListener) {
    let own = listener.local_addr().ok();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                warn!(error = %error, "transparent listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (shared, fence) = (shared.clone(), fence.clone());
        let span = info_span!("transparent", client.addr = %peer);
        tokio::spawn(
            async move {
                let Some(run) = fence.run_for_source(peer.ip()) else {
                    warn!("a redirected connection from a source bound to no open run; closed");
                    return;
                };
                if shared.is_closed(&run) {
                    warn!(run.id = %run, "a redirected connection of a closed run; closed");
                    return;
                }
                let Some(dst) = original_dst(&stream).filter(|dst| Some(*dst) != own) else {
                    warn!(run.id = %run, "a connection that was not redirected (no original destination); closed");
                    return;
                };
                let guard = match admit(&shared, &fence, &run) {
                    Ok(guard) => guard,
                    Err(cap) => return crate::listener::refuse_connection(stream, cap).await,
                };
                super::transparent::serve(shared, fence, run, dst, stream, guard).await;
            }
            .instrument(span),
        );
    }
}

/// A connection slot for `run` (`--max-connections`, then `--max-connections-per-run`),
/// or the cap reached (counted).
fn admit(
    shared: &DataPlane,
    fence: &Fence,
    run: &airlock_ledger::RunId,
) -> Result<Arc<airlock_net::limits::ConnectionGuard>, airlock_net::limits::Cap> {
    let guard = shared.connections.open().inspect_err(|_| {
        fence.refused_global();
        warn!(run.id = %run, "connection closed at --max-connections");
    })?;
    guard.bind(run).inspect_err(|_| {
        fence.limited(run);
        warn!(run.id = %run, "connection refused: the run is at --max-connections-per-run");
    })?;
    Ok(guard)
}

/// The destination a redirected connection was going to (`SO_ORIGINAL_DST`, set by
/// nftables `redirect` and `dnat`).
fn original_dst(stream: &TcpStream) -> Option<SocketAddr> {
    socket2::SockRef::from(stream)
        .original_dst_v4()
        .ok()
        .and_then(|addr| addr.as_socket())
}

/// Answers DNS over UDP on `socket` and over TCP on `listener` until dropped.
pub async fn serve_dns(
    shared: Arc<DataPlane>,
    fence: Arc<Fence>,
    socket: UdpSocket,
    listener: TcpListener,
) {
    let udp = {
        let (shared, fence) = (shared.clone(), fence.clone());
        async move {
            let mut buffer = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buffer).await else {
                    continue;
                };
                let Some(run) = fence
                    .run_for_source(from.ip())
                    .filter(|r| !shared.is_closed(r))
                else {
                    debug!(client.addr = %from, "DNS query from a source bound to no open run");
                    if let Some(refused) = super::dns::refused(&buffer[..n]) {
                        let _ = socket.send_to(&refused, from).await;
                    }
                    continue;
                };
                if !fence.admit_dns(&run, shared.limits.dns_queries_per_second) {
                    continue;
                }
                if let Some(answer) = super::dns::answer(&shared, &fence, &run, &buffer[..n]) {
                    let _ = socket.send_to(&answer, from).await;
                }
            }
        }
    };
    let tcp = async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let Some(run) = fence
                .run_for_source(peer.ip())
                .filter(|r| !shared.is_closed(r))
            else {
                debug!(client.addr = %peer, "DNS connection from a source bound to no open run");
                continue;
            };
            let Ok(guard) = admit(&shared, &fence, &run) else {
                continue;
            };
            let (shared, fence) = (shared.clone(), fence.clone());
            tokio::spawn(async move {
                super::dns::serve(&shared, &fence, &run, stream).await;
                drop(guard);
            });
        }
    };
    tokio::join!(udp, tcp);
}
