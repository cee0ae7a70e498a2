//! The WebSocket messages a client sends after the handshake (RFC 6455 §5), read on their
//! way to the origin: each data message, reassembled from its fragments (§5.4) and
//! inflated when `permessage-deflate` compressed it (RFC 7692 §7.2.2), and each control
//! frame's payload is searched for what must never reach an origin (a placeholder of a
//! staged effect, a credential placeholder bound to another host) before its frames are
//! forwarded, byte for byte as the client sent them. A message that carries one is never
//! forwarded: the client is sent a Close with status 1008 (policy violation, §7.4.1)
//! naming the reason code, and both connections are closed. The origin's frames are
//! relayed to the client unread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use airlock_ledger::RunId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::DataPlane;
use airlock_net::respond::ProxyError;

/// What a client message was searched against, and the most one may hold.
pub(super) struct Inspector {
    /// The data plane (its placeholder cache, policy and ledger).
    pub plane: Arc<DataPlane>,
    /// The run the connection belongs to.
    pub run: RunId,
    /// The origin's host (credential placeholders are bound to hosts).
    pub host: String,
    /// The origin's port (flows judge a destination by host and port).
    pub port: u16,
    /// The handshake's URL (for flows and the denial journal).
    pub url: String,
    /// The rule that passed the handshake.
    pub rule: Option<String>,
    /// The most bytes one message may hold, compressed or inflated (`--stage-body-limit`):
    /// a larger one cannot be searched, and the connection is closed with 1009.
    pub limit: u64,
}

/// How a relayed WebSocket connection ended.
#[derive(Debug, Default)]
pub(super) struct Relayed {
    /// Bytes from the client forwarded to the origin.
    pub up: u64,
    /// Bytes from the origin relayed to the client.
    pub down: u64,
    /// Closed because no byte moved for the idle timeout.
    pub idle: bool,
    /// A client message was refused: the close status and reason sent to the client.
    pub refused: Option<(u16, String)>,
    /// The I/O or protocol error that ended it, if any.
    pub error: Option<String>,
}

/// Relays `client` and `origin` until both sides close, a client message is refused, an
/// error, or `idle` passes with no byte moving either way.
pub(super) async fn relay<C, O>(
    client: C,
    origin: O,
    idle: Duration,
    inspector: Inspector,
) -> Relayed
where
    C: AsyncRead + AsyncWrite + Unpin,
    O: AsyncRead + AsyncWrite + Unpin,
{
    let started = Instant::now();
    let last = AtomicU64::new(0);
    let touch = || last.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    let (up_bytes, down_bytes) = (AtomicU64::new(0), AtomicU64::new(0));
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut origin_read, mut origin_write) = tokio::io::split(origin);
    let mut relayed = Relayed::default();
    {
        let up = relay_up(
            &mut client_read,
            &mut origin_write,
            &inspector,
            &touch,
            &up_bytes,
        );
        let down = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = origin_read
                    .read(&mut buf)
                    .await
                    .map_err(|e| e.to_string())?;
                if n == 0 {
                    let _ = client_write.shutdown().await;
                    return Ok::<(), String>(());
                }
                client_write
                    .write_all(&buf[..n])
                    .await
                    .map_err(|e| e.to_string())?;
                down_bytes.fetch_add(n as u64, Ordering::Relaxed);
                touch();
            }
        };
        let watchdog = async {
            loop {
                let at = started + Duration::from_millis(last.load(Ordering::Relaxed)) + idle;
                if Instant::now() >= at {
                    return;
                }
                tokio::time::sleep_until(at).await;
            }
        };
        tokio::pin!(up, down, watchdog);
        let (mut up_done, mut down_done) = (false, false);
        while !(up_done && down_done) {
            tokio::select! {
                ended = &mut up, if !up_done => match ended {
                    Ok(None) => up_done = true,
                    Ok(Some(refusal)) => {
                        relayed.refused = Some(refusal);
                        break;
                    }
                    Err(error) => {
                        relayed.error = Some(error);
                        break;
                    }
                },
                ended = &mut down, if !down_done => match ended {
                    Ok(()) => down_done = true,
                    Err(error) => {
                        relayed.error = Some(error);
                        break;
                    }
                },
                () = &mut watchdog => {
                    relayed.idle = true;
                    break;
                }
            }
        }
    }
    if let Some((code, reason)) = &relayed.refused {
        // The origin's side is dropped unread from here; the client is told why.
        let _ = client_write.write_all(&close_frame(*code, reason)).await;
        let _ = client_write.shutdown().await;
    }
    relayed.up = up_bytes.load(Ordering::Relaxed);
    relayed.down = down_bytes.load(Ordering::Relaxed);
    relayed
}

/// A data message being reassembled.
#[derive(Default)]
struct Message {
    /// The frames as the client sent them (masked), to forward once searched.
    raw: Vec<u8>,
    /// The unmasked payload.
    payload: Vec<u8>,
    /// RSV1 on its first frame: compressed by `permessage-deflate`.
    compressed: bool,
    started: bool,
}

/// Reads the client's frames, searches each message and control payload, and forwards
/// what may go. `Ok(None)` when the client closed its side; `Ok(Some((code, reason)))`
/// when a message was refused (nothing of it was forwarded).
async fn relay_up<R, W>(
    client: &mut R,
    origin: &mut W,
    inspector: &Inspector,
    touch: &impl Fn(),
    forwarded: &AtomicU64,
) -> Result<Option<(u16, String)>, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut message = Message::default();
    // One inflater for the connection: with context takeover (RFC 7692 §7.2.3) each
    // message may refer back to the ones before it.
    let mut inflater = flate2::Decompress::new(false);
    loop {
        let Some(frame) = read_frame(client, inspector.limit).await? else {
            let _ = origin.shutdown().await;
            return Ok(None);
        };
        touch();
        let frame = match frame {
            Ok(frame) => frame,
            Err(too_big) => return Ok(Some((1009, too_big))),
        };
        let to_forward = if frame.opcode >= 0x8 {
            // A control frame (ping, pong, close) may come between fragments: searched
            // and forwarded at once.
            if let Some(reason) = refusal(inspector, &frame.payload).await? {
                return Ok(Some((1008, reason)));
            }
            frame.raw
        } else {
            if !message.started {
                message.started = true;
                message.compressed = frame.rsv1;
            }
            message.raw.extend_from_slice(&frame.raw);
            message.payload.extend_from_slice(&frame.payload);
            if message.raw.len() as u64 > inspector.limit {
                return Ok(Some((1009, too_big(inspector.limit))));
            }
            if !frame.fin {
                continue;
            }
            let done = std::mem::take(&mut message);
            let text = if done.compressed {
                match inflate(&mut inflater, &done.payload, inspector.limit) {
                    Ok(text) => text,
                    Err(reason) => return Ok(Some((1008, reason))),
                }
            } else {
                done.payload
            };
            if let Some(reason) = refusal(inspector, &text).await? {
                return Ok(Some((1008, reason)));
            }
            done.raw
        };
        origin
            .write_all(&to_forward)
            .await
            .map_err(|e| e.to_string())?;
        forwarded.fetch_add(to_forward.len() as u64, Ordering::Relaxed);
    }
}

/// Why `payload` must not reach the origin (a reason code with the effect or credential),
/// or `None`. A fault reading the run's placeholders refuses it (fails closed).
async fn refusal(inspector: &Inspector, payload: &[u8]) -> Result<Option<String>, String> {
    let found =
        crate::handle::message_refusal(&inspector.plane, &inspector.run, &inspector.host, payload)
            .await;
    match found {
        Ok(Some(found)) => return Ok(Some(found)),
        Ok(None) => {}
        Err(error) => return Ok(Some(format!("placeholder_check_failed: {}", error.code()))),
    }
    // Flows judge what a message carries as they judge a passed write's body.
    let flow = crate::flows::pass::check_message(
        &inspector.plane,
        &inspector.run,
        &inspector.url,
        &inspector.host,
        inspector.port,
        inspector.rule.as_deref(),
        payload,
    )
    .await;
    Ok(match flow {
        Ok(()) => None,
        Err(ProxyError::Denied {
            reason_code,
            reason,
            ..
        }) => Some(format!("{reason_code}: {reason}")),
        Err(other) => Some(format!("{}: {other}", other.code())),
    })
}

fn too_big(limit: u64) -> String {
    format!("message_too_big: over {limit} bytes (--stage-body-limit) cannot be searched")
}

/// One frame: header fields, the unmasked payload, and the bytes as sent.
struct Frame {
    fin: bool,
    rsv1: bool,
    opcode: u8,
    payload: Vec<u8>,
    raw: Vec<u8>,
}

/// Reads one client frame (RFC 6455 §5.2). `Ok(None)` at a clean end of stream before a
/// frame; `Ok(Some(Err(reason)))` for a frame over `limit` (not read).
async fn read_frame<R: AsyncRead + Unpin>(
    client: &mut R,
    limit: u64,
) -> Result<Option<Result<Frame, String>>, String> {
    let mut head = [0u8; 2];
    match client.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let io = |e: std::io::Error| e.to_string();
    let mut raw = head.to_vec();
    let masked = head[1] & 0x80 != 0;
    let len = match head[1] & 0x7f {
        126 => {
            let mut ext = [0u8; 2];
            client.read_exact(&mut ext).await.map_err(io)?;
            raw.extend_from_slice(&ext);
            u64::from(u16::from_be_bytes(ext))
        }
        127 => {
            let mut ext = [0u8; 8];
            client.read_exact(&mut ext).await.map_err(io)?;
            raw.extend_from_slice(&ext);
            u64::from_be_bytes(ext)
        }
        n => u64::from(n),
    };
    if len > limit {
        return Ok(Some(Err(too_big(limit))));
    }
    let mut mask = [0u8; 4];
    if masked {
        client.read_exact(&mut mask).await.map_err(io)?;
        raw.extend_from_slice(&mask);
    }
    let start = raw.len();
    raw.resize(start + len as usize, 0);
    client.read_exact(&mut raw[start..]).await.map_err(io)?;
    let payload = raw[start..]
        .iter()
        .enumerate()
        .map(|(i, b)| if masked { b ^ mask[i % 4] } else { *b })
        .collect();
    Ok(Some(Ok(Frame {
        fin: head[0] & 0x80 != 0,
        rsv1: head[0] & 0x40 != 0,
        opcode: head[0] & 0x0f,
        payload,
        raw,
    })))
}

/// Inflates one `permessage-deflate` message (RFC 7692 §7.2.2: the payload, then
/// `00 00 ff ff`), at most `limit` bytes.
fn inflate(
    inflater: &mut flate2::Decompress,
    payload: &[u8],
    limit: u64,
) -> Result<Vec<u8>, String> {
    let mut input = payload.to_vec();
    input.extend_from_slice(&[0x00, 0x00, 0xff, 0xff]);
    let mut out: Vec<u8> = Vec::with_capacity(input.len() * 4);
    let mut at = 0;
    loop {
        if out.len() == out.capacity() {
            out.reserve(16 * 1024);
        }
        let before_in = inflater.total_in();
        let before_out = inflater.total_out();
        let status = inflater
            .decompress_vec(&input[at..], &mut out, flate2::FlushDecompress::Sync)
            .map_err(|_| {
                "message_undecodable: its permessage-deflate data did not inflate".to_owned()
            })?;
        at += (inflater.total_in() - before_in) as usize;
        if out.len() as u64 > limit {
            return Err(too_big(limit));
        }
        if status == flate2::Status::StreamEnd {
            // A final block (BFINAL) ends this sender's stream: its next message starts a
            // new one (RFC 7692 §7.2.3.4).
            inflater.reset(false);
            return Ok(out);
        }
        let progressed = inflater.total_out() > before_out || inflater.total_in() > before_in;
        if at >= input.len() && out.len() < out.capacity() {
            return Ok(out);
        }
        if !progressed {
            return Ok(out);
        }
    }
}

/// A Close frame from the server side (unmasked, §5.5.1) with `code` and `reason` (cut to
/// the 123 bytes a control frame leaves it, at a character boundary).
fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut frame = vec![0x88, (2 + cut) as u8];
    frame.extend_from_slice(&code.to_be_bytes());
    frame.extend_from_slice(&reason.as_bytes()[..cut]);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_compressed_message_inflates_across_messages() {
        // Two messages from one raw deflate stream, each ended by a sync flush whose
        // trailing 00 00 ff ff the sender drops (RFC 7692 §7.2.1).
        let mut deflater =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        let mut messages = Vec::new();
        for text in ["hello ph_abc", "hello ph_abc again"] {
            deflater.write_all(text.as_bytes()).expect("deflate");
            deflater.flush().expect("flush");
            let all = std::mem::take(deflater.get_mut());
            assert!(all.ends_with(&[0, 0, 0xff, 0xff]));
            messages.push(all[..all.len() - 4].to_vec());
        }
        let mut inflater = flate2::Decompress::new(false);
        assert_eq!(
            inflate(&mut inflater, &messages[0], 1024).expect("first"),
            b"hello ph_abc"
        );
        assert_eq!(
            inflate(&mut inflater, &messages[1], 1024).expect("second"),
            b"hello ph_abc again"
        );
        assert!(inflate(&mut flate2::Decompress::new(false), &messages[1], 4).is_err());
        // A message ended by a final block, then one from a fresh stream.
        let mut ended = Vec::new();
        for text in ["first ph_abc", "second ph_abc"] {
            let mut one =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            one.write_all(text.as_bytes()).expect("deflate");
            ended.push(one.finish().expect("finish"));
        }
        let mut inflater = flate2::Decompress::new(false);
        assert_eq!(
            inflate(&mut inflater, &ended[0], 1024).expect("first"),
            b"first ph_abc"
        );
        assert_eq!(
            inflate(&mut inflater, &ended[1], 1024).expect("second"),
            b"second ph_abc"
        );
        assert_eq!(close_frame(1008, "x"), vec![0x88, 3, 0x03, 0xf0, b'x']);
    }
}
