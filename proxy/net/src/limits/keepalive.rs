//! Deadlines of client HTTP connections (issue #7): the keep-alive (idle) timeout and the
//! authentication deadline.
//!
//! - `--keep-alive-timeout`: an HTTP connection — a plain proxy connection, or an HTTP/1.1
//!   or h2 connection intercepted inside a CONNECT tunnel — with no request in flight and
//!   no byte either way for that long is closed gracefully: hyper's `graceful_shutdown`
//!   (h2: GOAWAY, then close once its streams are done; HTTP/1.1: close now if idle,
//!   else after the response in progress), and the connection is polled on to completion.
//!   A request counts as in flight from the service call until its response body has been
//!   sent or dropped and its request body read or dropped, and a connection whose last
//!   write or flush is waiting for the client to read is busy too, so a slow origin, a long
//!   SSE stream, an upload after an early answer or a slow reader is never cut by this
//!   timeout (the pass path has no whole-request deadline).
//! - `--auth-timeout`: a connection on the proxy listener that has not authenticated
//!   within that long of being accepted (see [`ConnectionGuard::bind`]), or that a newer
//!   connection evicted from `--max-unauthenticated-connections`, is closed: first
//!   gracefully (a request head already read is answered, e.g. 407), then for good a
//!   moment later, whatever the client is still dribbling.
//!
//! Byte splices (`tunnel` rules, upgraded connections) have their own `--idle-timeout`
//! ([`super::splice`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Response;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tracing::{debug, info};

use super::{Closed, ConnectionGuard, Connections};
use crate::body::ProxyBody;

/// Default keep-alive timeout: 5 minutes. Longer than the idle timeouts of common client
/// pools (Go's `net/http` drops idle connections after 90 s), so that the client, not
/// airlock, usually closes an idle connection and a request never races airlock's close;
/// long enough to keep a connection (and its TLS session) across an agent's pauses between
/// tool calls; short enough that abandoned connections give back their
/// `--max-connections-per-run` slots within minutes. (nginx's `keepalive_timeout` is
/// 75 s, Envoy's downstream `idle_timeout` 1 h.)
pub const DEFAULT_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// Default authentication deadline: 10 s from accept. A client sends its credentials with
/// its first request, or with the retry right after a 407, both within a round trip or two.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection closed for not authenticating may take to finish the answer in
/// progress before it is dropped.
const AUTH_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// After a graceful close, a connection with no request in flight and no byte either way
/// for this long is dropped (a client that never reads its GOAWAY or FIN).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// What a client connection did last: shared by its I/O ([`Activity::io`]), its requests
/// ([`Activity::request`]) and its watchdog ([`watch`]); a byte splice
/// ([`super::splice`]) shares one between its two sides.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    /// Milliseconds after `start` when a byte last moved or a request last ended.
    last: AtomicU64,
    in_flight: AtomicUsize,
    /// The last write to the client could not complete (the client is not reading): the
    /// connection is then waiting on the client, not idle, however long no byte moves.
    write_blocked: std::sync::atomic::AtomicBool,
    /// Woken when a request ends, so the watchdog re-arms its timer.
    waker: futures_util::task::AtomicWaker,
}

impl Activity {
    /// A connection that starts now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            write_blocked: std::sync::atomic::AtomicBool::new(false),
            waker: futures_util::task::AtomicWaker::new(),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// When a byte last moved or a request last ended.
    pub(crate) fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    /// A request is in flight, or airlock is waiting for the client to read what it wrote
    /// (a response hyper has finished with may still sit in the connection's buffers).
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0 || self.write_blocked.load(Ordering::Relaxed)
    }

    /// Notes how a write to the client went.
    fn wrote(&self, polled: &Poll<std::io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.write_blocked.store(false, Ordering::Relaxed);
                self.touch();
            }
            Poll::Pending => self.write_blocked.store(true, Ordering::Relaxed),
            Poll::Ready(_) => self.write_blocked.store(false, Ordering::Relaxed),
        }
    }

    /// A request starts: it is in flight until the returned guard is dropped (hand it to
    /// [`hold`] with the response). The request carries the connection's activity on, so
    /// that its body, too, counts as in flight until it is dropped ([`hold_body`]): an
    /// upload can go on after an early answer.
    pub fn request<B>(self: &Arc<Self>, req: &mut http::Request<B>) -> InFlight {
        req.extensions_mut().insert(OnConnection(self.clone()));
        self.in_flight()
    }

    fn in_flight(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InFlight(self.clone())
    }

    /// Wraps the connection's I/O so that every byte read or written counts as activity.
    pub fn io<T>(self: &Arc<Self>, inner: T) -> Active<T> {
        Active {
            inner,
            activity: self.clone(),
            read: None,
        }
    }

    /// As [`Activity::io`], also adding every byte read to `read` (a splice's count of
    /// each direction).
    pub(crate) fn io_counting<T>(self: &Arc<Self>, inner: T, read: Arc<AtomicU64>) -> Active<T> {
        Active {
            inner,
            activity: self.clone(),
            read: Some(read),
        }
    }
}

/// A request in flight on a connection (see [`Activity::request`]).
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.waker.wake();
    }
}

/// The connection a request arrived on (a request extension; [`Activity::request`]).
#[derive(Clone, Debug)]
struct OnConnection(Arc<Activity>);

/// The request body of `parts`, counted as in flight on its connection until it is dropped
/// (consumed by the origin's side, or refused). Requests that did not come through
/// [`Activity::request`] are returned as they are.
pub fn hold_body(parts: &http::request::Parts, body: ProxyBody) -> ProxyBody {
    match parts.extensions.get::<OnConnection>() {
        Some(OnConnection(activity)) => {
            crate::body::Guarded::new(body, Box::new(activity.in_flight())).boxed()
        }
        None => body,
    }
}

/// The response with `in_flight` held until its body has been sent or dropped.
pub fn hold(response: Response<ProxyBody>, in_flight: InFlight) -> Response<ProxyBody> {
    response.map(|body| crate::body::Guarded::new(body, Box::new(in_flight)).boxed())
}

/// I/O that notes every byte read or written in its connection's [`Activity`].
#[derive(Debug)]
pub struct Active<T> {
    inner: T,
    activity: Arc<Activity>,
    read: Option<Arc<AtomicU64>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Active<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        if n > 0 {
            if let Some(read) = &self.read {
                read.fetch_add(n as u64, Ordering::Relaxed);
            }
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Active<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // A TLS stream takes the plaintext into its buffer and then waits in flush for the
        // client to read: that wait is blocked too.
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.activity
            .write_blocked
            .store(polled.is_pending(), Ordering::Relaxed);
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The deadlines one connection is watched for.
pub struct Deadlines<'a> {
    /// The connection's activity.
    pub activity: Arc<Activity>,
    /// `--keep-alive-timeout`.
    pub keep_alive: Duration,
    /// For a proxy-listener connection: its guard (authenticated once bound to a run) and
    /// `--auth-timeout`.
    pub auth: Option<(Arc<ConnectionGuard>, Duration)>,
    /// Where closes are counted for `/metrics`.
    pub connections: &'a Connections,
    /// For an HTTP/1.1 connection read through a [`crate::strict_head::StrictHead`]: a
    /// refused head starts the graceful shutdown at once.
    pub head: Option<crate::strict_head::HeadWatch>,
}

/// Where a watched connection is.
#[derive(Debug, Clone, Copy)]
enum State {
    Open,
    /// Graceful shutdown started at this instant (the connection went idle, or it
    /// authenticated just after its authentication deadline).
    Closing(Instant),
    /// Graceful shutdown started because it did not authenticate; dropped at this instant.
    Unauthenticated(Instant),
}

/// What the watchdog does after looking at the clock.
enum Step {
    /// Sleep until then (or until a request ends).
    Wait(Instant),
    /// Start the graceful shutdown, then look again.
    Shutdown,
    /// Drop the connection.
    Drop,
}

/// Drives `conn` (a hyper server connection) to completion, starting its graceful shutdown
/// (`shutdown`, e.g. `|c| c.graceful_shutdown()`) when a deadline passes (module docs).
/// Resolves to `None` when the connection had to be dropped before it completed.
///
/// A hand-written future rather than an `async fn`: rustc cannot prove an `async fn`
/// generic over hyper's connection types `Send` ("implementation of `From` is not general
/// enough", rust-lang/rust#64552).
pub fn watch<C, F>(conn: C, shutdown: F, deadlines: Deadlines<'_>) -> Watch<'_, C, F>
where
    C: Future,
    F: FnMut(Pin<&mut C>) + Unpin,
{
    let auth_at = deadlines
        .auth
        .as_ref()
        .map(|(_, timeout)| deadlines.activity.start + *timeout);
    Watch {
        conn: Box::pin(conn),
        shutdown,
        deadlines,
        auth_at,
        state: State::Open,
        timer: Box::pin(tokio::time::sleep_until(Instant::now())),
    }
}

/// The future [`watch`] returns.
pub struct Watch<'a, C, F> {
    conn: Pin<Box<C>>,
    shutdown: F,
    deadlines: Deadlines<'a>,
    auth_at: Option<Instant>,
    state: State,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<C, F> Watch<'_, C, F> {
    fn unauthenticated(&self) -> bool {
        self.deadlines
            .auth
            .as_ref()
            .is_some_and(|(guard, _)| !guard.is_authenticated())
    }

    /// Whether the connection, still unauthenticated, was evicted by a newer one.
    fn evicted(&self) -> bool {
        self.deadlines
            .auth
            .as_ref()
            .is_some_and(|(guard, _)| !guard.is_authenticated() && guard.eviction().is_evicted())
    }

    /// The state machine of the module docs, at `now`.
    fn step(&mut self, now: Instant) -> Step {
        let activity = &self.deadlines.activity;
        let keep_alive = self.deadlines.keep_alive;
        // While a request is in flight only its end (which wakes the task) can make the
        // connection idle: the timer then just re-checks now and then.
        let busy = activity.busy();
        let quiet = |since: Instant, grace: Duration| {
            if busy {
                now + grace
            } else {
                activity.last().max(since) + grace
            }
        };
        match self.state {
            State::Open => {
                if self
                    .deadlines
                    .head
                    .as_ref()
                    .is_some_and(crate::strict_head::HeadWatch::refused)
                {
                    self.state = State::Closing(now);
                    return Step::Shutdown;
                }
                if self.evicted() {
                    info!(
                        "a newer connection took this unauthenticated connection's slot \
                         (--max-unauthenticated-connections); closing it"
                    );
                    self.state = State::Unauthenticated(now + AUTH_CLOSE_GRACE);
                    return Step::Shutdown;
                }
                if let Some(at) = self.auth_at.filter(|_| self.unauthenticated()) {
                    if now >= at {
                        let secs = self.deadlines.auth.as_ref().map_or(0, |(_, t)| t.as_secs());
                        info!(
                            auth_timeout_secs = secs,
                            "the connection did not authenticate within --auth-timeout; closing it"
                        );
                        self.deadlines.connections.closed(Closed::Auth);
                        self.state = State::Unauthenticated(now + AUTH_CLOSE_GRACE);
                        return Step::Shutdown;
                    }
                }
                let idle_at = quiet(activity.start, keep_alive);
                if !busy && now >= idle_at {
                    debug!(
                        keep_alive_secs = keep_alive.as_secs(),
                        "idle past --keep-alive-timeout; closing the connection gracefully"
                    );
                    self.deadlines.connections.closed(Closed::KeepAlive);
                    self.state = State::Closing(now);
                    return Step::Shutdown;
                }
                match self.auth_at.filter(|_| self.unauthenticated()) {
                    Some(at) => Step::Wait(idle_at.min(at)),
                    None => Step::Wait(idle_at),
                }
            }
            State::Closing(since) => {
                let drop_at = quiet(since, CLOSE_GRACE);
                if !busy && now >= drop_at {
                    debug!("the client did not finish a graceful close; dropping the connection");
                    return Step::Drop;
                }
                Step::Wait(drop_at)
            }
            State::Unauthenticated(at) => {
                if !self.unauthenticated() {
                    // A request that raced the deadline authenticated: let it finish.
                    self.state = State::Closing(now);
                    return self.step(now);
                }
                if now >= at {
                    return Step::Drop;
                }
                Step::Wait(at)
            }
        }
    }
}

impl<C, F> Future for Watch<'_, C, F>
where
    C: Future,
    F: FnMut(Pin<&mut C>) + Unpin,
{
    type Output = Option<C::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.deadlines.activity.waker.register(cx.waker());
        if let Some((guard, _)) = &this.deadlines.auth {
            guard.eviction().register(cx.waker());
        }
        loop {
            if let Poll::Ready(output) = this.conn.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            match this.step(Instant::now()) {
                Step::Drop => return Poll::Ready(None),
                Step::Shutdown => (this.shutdown)(this.conn.as_mut()),
                Step::Wait(at) => {
                    // Re-arm only to fire earlier (or once fired): a deadline that moved
                    // later is found when the earlier one fires, so a busy connection does
                    // not reset its timer on every poll.
                    if at < this.timer.deadline() || this.timer.is_elapsed() {
                        this.timer.as_mut().reset(at);
                    }
                    if this.timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}
