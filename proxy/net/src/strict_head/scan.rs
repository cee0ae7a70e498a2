//! The byte scanner under [`super::StrictHead`]: follows HTTP/1.1 request framing (RFC 9112
//! §6: heads, `Content-Length` and chunked bodies) just far enough to know which bytes are
//! request heads, and finds a line feed not preceded by a carriage return in a head.
//!
//! It never decides what a message means: whatever it cannot follow (a head httparse does
//! not take, a `Transfer-Encoding` other than chunked, a malformed chunk) it stops
//! scanning ([`State::Passthrough`]) and leaves to hyper, which refuses such messages
//! itself.

use crate::headers::{PARSER_MAX_HEADERS, PARSER_MAX_HEADER_BYTES};

/// What the scanner expects next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum State {
    /// A request head, starting at `start` of the buffer being scanned.
    Head(Head),
    /// This many body bytes (`Content-Length`).
    Body(u64),
    /// A chunked body (RFC 9112 §7.1).
    Chunked(Chunk),
    /// After the head of a `CONNECT` or of a request asking to upgrade: the bytes that
    /// follow may be a tunnel; not scanned until [`super::HeadWatch::not_upgraded`].
    Suspended,
    /// Not followed any more; hyper reads what comes.
    Passthrough,
    /// A head with a bare LF was found; nothing more is handed on.
    Refused,
}

/// Where the scan of a head is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Head {
    /// Offset of the head's first byte in the buffer being scanned.
    pub(super) start: usize,
    /// Bytes of the current line, CRs not counted.
    line_len: usize,
    /// Lines ended so far (empty lines before the request line not counted).
    lines: usize,
    /// The last byte seen was a CR.
    after_cr: bool,
}

/// Where the scan of a chunked body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chunk {
    /// The chunk-size line: the size so far, its digits, and whether an extension or
    /// whitespace began.
    Size { size: u64, digits: u8, rest: bool },
    /// This many chunk-data bytes.
    Data(u64),
    /// The CRLF after chunk data (`cr`: the CR was seen).
    DataEnd { cr: bool },
    /// The trailer section, until an empty line.
    Trailer { line_len: usize },
}

/// What one scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// The first `n` bytes may go on; the rest (an unfinished head) must wait for more.
    Accept(usize),
    /// The first `n` bytes may go on; a head with a bare LF starts at `n`.
    Refuse(usize),
}

impl State {
    /// The state at the start of a connection.
    pub(super) fn new() -> Self {
        State::Head(Head::default())
    }

    /// Scans `data[from..]`, where `data[..from]` was scanned before and, in
    /// [`State::Head`], the head starts at `start` (every byte before it was accepted).
    /// Afterwards, a [`State::Head`] start is still an offset in `data`; the caller
    /// rebases it with [`State::rebase`] when it drops accepted bytes.
    pub(super) fn scan(&mut self, data: &[u8], from: usize) -> Scan {
        let mut at = from;
        loop {
            match self {
                State::Head(head) => {
                    let mut complete = None;
                    while at < data.len() {
                        let byte = data[at];
                        at += 1;
                        match byte {
                            b'\n' if !head.after_cr => {
                                let start = head.start;
                                *self = State::Refused;
                                return Scan::Refuse(start);
                            }
                            b'\n' if head.line_len == 0 && head.lines == 0 => {
                                // An empty line before the request line (RFC 9112 §2.2
                                // lets a server ignore it; hyper does).
                                head.after_cr = false;
                            }
                            b'\n' if head.line_len == 0 => {
                                complete = Some(framing(&data[head.start..at], at));
                                break;
                            }
                            b'\n' if head.lines == 0 && !request_line(&data[head.start..at]) => {
                                // Not HTTP at all (an SSH banner, TLS in the clear): hyper
                                // answers it at once, as it would without this scan.
                                *self = State::Passthrough;
                                return Scan::Accept(data.len());
                            }
                            b'\n' => {
                                head.lines += 1;
                                head.line_len = 0;
                                head.after_cr = false;
                            }
                            b'\r' => head.after_cr = true,
                            _ => {
                                head.line_len += 1;
                                head.after_cr = false;
                            }
                        }
                        if (at - head.start) as u64 > u64::from(PARSER_MAX_HEADER_BYTES) + 2 {
                            // Over hyper's own limit: hyper answers 431.
                            *self = State::Passthrough;
                            return Scan::Accept(data.len());
                        }
                    }
                    match complete {
                        Some(next) => *self = next,
                        None => return Scan::Accept(head.start),
                    }
                }
                State::Body(left) => {
                    let take = (*left).min((data.len() - at) as u64);
                    at += take as usize;
                    *left -= take;
                    if *left > 0 {
                        return Scan::Accept(data.len());
                    }
                    *self = State::Head(Head {
                        start: at,
                        ..Head::default()
                    });
                }
                State::Chunked(chunk) => match chunk_step(chunk, data, &mut at) {
                    Some(next) => *self = next,
                    None => return Scan::Accept(data.len()),
                },
                State::Suspended | State::Passthrough => return Scan::Accept(data.len()),
                State::Refused => return Scan::Refuse(from),
            }
        }
    }

    /// Moves a head's start `by` bytes back, once the caller dropped that many accepted
    /// bytes from the front of its buffer.
    pub(super) fn rebase(&mut self, by: usize) {
        if let State::Head(head) = self {
            head.start = head.start.saturating_sub(by);
        }
    }
}

/// Advances a chunked body over `data[*at..]`: the next state when the body ended (a new
/// head at `*at`) or could not be followed, `None` when `data` ran out first.
fn chunk_step(chunk: &mut Chunk, data: &[u8], at: &mut usize) -> Option<State> {
    while *at < data.len() {
        if let Chunk::Data(left) = chunk {
            let take = (*left).min((data.len() - *at) as u64);
            *at += take as usize;
            *left -= take;
            if *left == 0 {
                *chunk = Chunk::DataEnd { cr: false };
            }
            continue;
        }
        let byte = data[*at];
        *at += 1;
        match chunk {
            Chunk::Size { size, digits, rest } => match byte {
                b'\n' if *digits == 0 => return Some(State::Passthrough),
                b'\n' if *size == 0 => *chunk = Chunk::Trailer { line_len: 0 },
                b'\n' => *chunk = Chunk::Data(*size),
                b'\r' => {}
                _ if *rest => {}
                _ => match (byte as char).to_digit(16) {
                    Some(digit) if *digits < 16 => {
                        *size = (*size << 4) | u64::from(digit);
                        *digits += 1;
                    }
                    Some(_) => return Some(State::Passthrough),
                    None if byte == b';' || byte == b' ' || byte == b'\t' => *rest = true,
                    None => return Some(State::Passthrough),
                },
            },
            Chunk::DataEnd { cr } => match byte {
                b'\r' if !*cr => *cr = true,
                b'\n' => {
                    *chunk = Chunk::Size {
                        size: 0,
                        digits: 0,
                        rest: false,
                    }
                }
                _ => return Some(State::Passthrough),
            },
            Chunk::Trailer { line_len } => match byte {
                b'\n' if *line_len == 0 => {
                    return Some(State::Head(Head {
                        start: *at,
                        ..Head::default()
                    }))
                }
                b'\n' => *line_len = 0,
                b'\r' => {}
                _ => *line_len += 1,
            },
            Chunk::Data(_) => {}
        }
    }
    None
}

/// Whether `line` (the head so far: its first line, CRLF included) can start a request:
/// httparse takes it as a request line waiting for its header fields.
fn request_line(line: &[u8]) -> bool {
    let mut request = httparse::Request::new(&mut []);
    matches!(request.parse(line), Ok(httparse::Status::Partial))
}

/// The state after a complete head `head` that ends at `end`: its body's framing.
fn framing(head: &[u8], end: usize) -> State {
    let mut headers = [httparse::EMPTY_HEADER; PARSER_MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return State::Passthrough,
    }
    if request.method == Some("CONNECT")
        || request
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("upgrade"))
    {
        return State::Suspended;
    }
    let headers: &[httparse::Header<'_>] = request.headers;
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| std::str::from_utf8(h.value).unwrap_or("\u{0}").split(','))
            .map(str::trim)
    };
    if let Some(last) = values("transfer-encoding").next_back() {
        return if last.eq_ignore_ascii_case("chunked") {
            State::Chunked(Chunk::Size {
                size: 0,
                digits: 0,
                rest: false,
            })
        } else {
            State::Passthrough
        };
    }
    let mut length: Option<u64> = None;
    for value in values("content-length") {
        match (value.parse::<u64>(), length) {
            (Ok(n), None) => length = Some(n),
            (Ok(n), Some(seen)) if n == seen => {}
            _ => return State::Passthrough,
        }
    }
    match length {
        Some(n) if n > 0 => State::Body(n),
        _ => State::Head(Head {
            start: end,
            ..Head::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes the way the wrapper does; returns the
    /// bytes accepted in order and whether a refusal came.
    fn feed(input: &[u8], step: usize) -> (Vec<u8>, bool) {
        let mut state = State::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut accepted = Vec::new();
        for piece in input.chunks(step) {
            let from = pending.len();
            pending.extend_from_slice(piece);
            match state.scan(&pending, from) {
                Scan::Accept(n) => {
                    accepted.extend_from_slice(&pending[..n]);
                    pending.drain(..n);
                    state.rebase(n);
                }
                Scan::Refuse(n) => {
                    accepted.extend_from_slice(&pending[..n]);
                    return (accepted, true);
                }
            }
        }
        (accepted, false)
    }

    #[test]
    fn crlf_requests_pass_whole_in_any_pieces() {
        let input: &[u8] = b"\r\nGET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n\
            POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\na\nb\nc\
            POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
            3;x=y\r\n\n\n\n\r\n0\r\nTrailer: t\r\n\r\n\
            GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n";
        for step in [1, 2, 7, 64, input.len()] {
            assert_eq!(feed(input, step), (input.to_vec(), false), "step {step}");
        }
    }

    #[test]
    fn a_bare_lf_in_any_head_is_refused_where_that_head_starts() {
        let first = b"GET http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n\n\n";
        for bad in [
            &b"GET http://a/ HTTP/1.1\nHost: a\r\n\r\n"[..],
            b"GET http://a/ HTTP/1.1\r\nHost: a\n\r\n",
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\n",
            b"\nGET http://a/ HTTP/1.1\r\n\r\n",
        ] {
            let input = [&first[..], bad].concat();
            for step in [1, 5, input.len()] {
                let (accepted, refused) = feed(&input, step);
                assert!(refused, "{:?} step {step}", String::from_utf8_lossy(bad));
                assert_eq!(accepted, first.to_vec(), "only the good request went on");
            }
        }
    }

    #[test]
    fn tunnels_and_unfollowable_framing_are_not_scanned() {
        let connect: &[u8] = b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n\x16\x03\x01\n\n";
        assert_eq!(feed(connect, 3), (connect.to_vec(), false));
        let gzip: &[u8] = b"POST http://a/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nx\ny\n";
        assert_eq!(feed(gzip, 4), (gzip.to_vec(), false));
        let banner: &[u8] = b"SSH-2.0-agent\r\n";
        let mut state = State::new();
        assert_eq!(
            state.scan(banner, 0),
            Scan::Accept(banner.len()),
            "not held back"
        );
        assert_eq!(state, State::Passthrough);
        let mut state = State::new();
        assert_eq!(
            state.scan(b"GET / HTTP/1.1\r\nHost", 0),
            Scan::Accept(0),
            "held back"
        );
        let mut resumed = State::Suspended;
        assert_eq!(resumed.scan(b"a\nb", 0), Scan::Accept(3));
        resumed = State::new();
        assert_eq!(
            resumed.scan(b"GET / HTTP/1.1\nHost: a\r\n\r\n", 0),
            Scan::Refuse(0)
        );
    }
}
