//! `git`: smart-HTTP push. `GET …/info/refs?service=git-receive-pack` is a read (a pass
//! rule lets it through); `POST …/git-receive-pack` is staged and answered with the
//! `report-status` git expects, so `git push` exits 0 and prints the ref updates. At
//! release the same body (commands and pack) is replayed, and the origin's own
//! report-status decides: an `ng` or a failed unpack makes the effect `failed` with git's
//! reason, although the HTTP status is 200.
//!
//! Wire formats: pkt-line and the receive-pack commands, capabilities, report-status and
//! report-status-v2 from git's `Documentation/gitprotocol-pack.txt` and
//! `gitprotocol-common.txt`; side-band-64k framing (band 1 data, 2 progress, 3 error) from
//! the same; the smart-HTTP media types from `gitprotocol-http.txt`.

use airlock_ledger::Effect;

use super::{Adapter, Call, Compensation, Plan, Synthetic};

pub mod pack;
pub mod review;

/// The git smart-HTTP push adapter.
#[derive(Debug, Clone, Copy)]
pub struct Git;

/// The all-zero object id (sha1) of a created or deleted ref.
const ZERO_ID: &str = "0000000000000000000000000000000000000000";

/// An empty version-2 pack: `PACK`, version 2, no objects, then the SHA-1 of those 12 bytes.
const EMPTY_PACK: &[u8] = b"PACK\x00\x00\x00\x02\x00\x00\x00\x00\x02\x9d\x08\x82\x3b\xd8\xa8\xea\xb5\x10\xad\x6a\xc7\x5c\x82\x3c\xfd\x3e\xd3\x1e";

/// One ref update of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The ref's value the client expects on the remote (zeros: create).
    pub old: String,
    /// The value it asks for (zeros: delete).
    pub new: String,
    /// The ref, e.g. `refs/heads/main`.
    pub name: String,
}

/// The commands and capabilities of a receive-pack request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushRequest {
    /// Ref updates in order.
    pub commands: Vec<Command>,
    /// Capabilities the client asked for (after the NUL of the first command).
    pub capabilities: Vec<String>,
}

impl PushRequest {
    fn has(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// Splits `data` into pkt-lines: `Some(payload)` per data line, `None` for a flush
/// (`0000`) or delimiter (`0001`); stops at the first malformed length. Returns the lines
/// and the offset after the last one read.
pub fn pkt_lines(data: &[u8]) -> (Vec<Option<&[u8]>>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= data.len() {
        let Some(length) = std::str::from_utf8(&data[at..at + 4])
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
        else {
            break;
        };
        match length {
            0..=2 => {
                out.push(None);
                at += 4;
            }
            3 => break,
            _ if at + length <= data.len() => {
                out.push(Some(&data[at + 4..at + length]));
                at += length;
            }
            _ => break,
        }
    }
    (out, at)
}

/// One pkt-line holding `payload`.
pub fn pkt_line(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Parses the command list of a receive-pack request (up to its flush). `None` when the
/// body does not start with commands.
pub fn parse_push(body: &[u8]) -> Option<PushRequest> {
    let (lines, _) = pkt_lines(body);
    let mut push = PushRequest::default();
    for line in lines {
        let Some(line) = line else {
            break;
        };
        let (command, capabilities) = match line.iter().position(|&b| b == 0) {
            Some(nul) => (&line[..nul], Some(&line[nul + 1..])),
            None => (line, None),
        };
        if let Some(caps) = capabilities {
            push.capabilities = String::from_utf8_lossy(caps)
                .split_whitespace()
                .map(str::to_owned)
                .collect();
        }
        let text = String::from_utf8_lossy(command);
        let mut fields = text.trim_end_matches('\n').splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        if !is_object_id(old) || !is_object_id(new) {
            return None;
        }
        push.commands.push(Command {
            old: old.to_owned(),
            new: new.to_owned(),
            name: name.to_owned(),
        });
    }
    (!push.commands.is_empty()).then_some(push)
}

/// What follows the commands of a receive-pack request (the pack, `PACK` onwards), when
/// anything does.
pub fn pack_of(body: &[u8]) -> Option<&[u8]> {
    let (_, start) = pkt_lines(body);
    body.get(start..).filter(|p| !p.is_empty())
}

/// What the push in `body` changes (commits, authors, paths, diffstat), read from its
/// pack within the default [`pack::Limits`]; `None` when `body` holds no commands. What
/// could not be read is in the review's notes.
pub fn review_of(body: &[u8]) -> Option<review::PushReview> {
    let push = parse_push(body)?;
    Some(match pack_of(body) {
        Some(data) => review::review(&push, &pack::read(data, pack::Limits::default())),
        None if push.commands.iter().all(|c| c.new == ZERO_ID) => review::PushReview::default(),
        None => review::PushReview {
            notes: vec!["the push carries no pack".to_owned()],
            ..review::PushReview::default()
        },
    })
}

fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(7)]
}

/// The report-status a receive-pack sends when every update was accepted, framed as the
/// client asked: nothing without `report-status`/`report-status-v2`; in band 1 of
/// side-band-64k when asked for.
pub fn accepted_report(push: &PushRequest) -> Vec<u8> {
    let mut report = Vec::new();
    if push.has("report-status") || push.has("report-status-v2") {
        report.extend(pkt_line(b"unpack ok\n"));
        for command in &push.commands {
            report.extend(pkt_line(format!("ok {}\n", command.name).as_bytes()));
        }
        report.extend_from_slice(b"0000");
    }
    if !push.has("side-band-64k") && !push.has("side-band") {
        return report;
    }
    let max = if push.has("side-band-64k") {
        65515
    } else {
        995
    };
    let mut out = Vec::new();
    for chunk in report.chunks(max - 1) {
        let mut payload = vec![1u8];
        payload.extend_from_slice(chunk);
        out.extend(pkt_line(&payload));
    }
    out.extend_from_slice(b"0000");
    out
}

/// Reads the origin's answer to a replayed push: `Err(reason)` when the unpack failed, a
/// ref was refused (`ng REF REASON`), the origin sent an error on band 3, or no report
/// came although one was asked for.
pub fn check_report(push: &PushRequest, response: &[u8]) -> Result<(), String> {
    let mut report = Vec::new();
    let mut errors = Vec::new();
    if push.has("side-band-64k") || push.has("side-band") {
        let (lines, _) = pkt_lines(response);
        for line in lines.into_iter().flatten() {
            match line.split_first() {
                Some((1, data)) => report.extend_from_slice(data),
                Some((3, data)) => errors.push(String::from_utf8_lossy(data).trim().to_owned()),
                _ => {}
            }
        }
    } else {
        report = response.to_vec();
    }
    if !errors.is_empty() {
        return Err(format!("git: {}", errors.join("; ")));
    }
    if !(push.has("report-status") || push.has("report-status-v2")) {
        return Ok(());
    }
    let (lines, _) = pkt_lines(&report);
    let mut refused = Vec::new();
    let mut unpacked = false;
    for line in lines.into_iter().flatten() {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\n');
        if let Some(status) = text.strip_prefix("unpack ") {
            if status != "ok" {
                refused.push(format!("unpack failed: {status}"));
            }
            unpacked = true;
        } else if text.starts_with("ng ") {
            refused.push(text.to_owned());
        }
    }
    if !unpacked {
        return Err("git: the origin sent no report-status for the push".to_owned());
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(format!("git refused the push: {}", refused.join("; ")))
    }
}

/// `push N ref update(s) [(C commit(s), O object(s))] to REMOTE: REF OLD..NEW, … —
/// 'subject' (author), …; P path(s) changed: PATH +A -R, …`: the ref updates
/// and, from the pack, what they carry ([`review::PushReview::line`]).
pub fn summary(push: &PushRequest, remote: &str, review: Option<&review::PushReview>) -> String {
    let updates: Vec<String> = push
        .commands
        .iter()
        .map(|c| format!("{} {}..{}", c.name, short(&c.old), short(&c.new)))
        .collect();
    let counts = review.filter(|r| r.objects > 0).map_or(String::new(), |r| {
        format!(" ({} commit(s), {} object(s))", r.commits.len(), r.objects)
    });
    let contents = review
        .filter(|r| !r.commits.is_empty() || !r.notes.is_empty())
        .map_or(String::new(), |r| format!(" — {}", r.line(400)));
    format!(
        "push {} ref update(s){counts} to {remote}: {}{contents}",
        push.commands.len(),
        updates.join(", ")
    )
}

impl Adapter for Git {
    fn name(&self) -> &'static str {
        "git"
    }

    fn plan(&self, call: &Call<'_>) -> Plan {
        if call.method != "POST" || !call.path().ends_with("/git-receive-pack") {
            return Plan::default();
        }
        let Some(push) = parse_push(call.body) else {
            return Plan::default();
        };
        let remote = format!(
            "{}{}",
            call.authority(),
            call.path().trim_end_matches("/git-receive-pack")
        );
        Plan::new(
            "receive-pack",
            summary(&push, &remote, review_of(call.body).as_ref()),
            &[],
        )
    }

    fn details(&self, call: &Call<'_>) -> Option<serde_json::Value> {
        if call.method != "POST" || !call.path().ends_with("/git-receive-pack") {
            return None;
        }
        review_of(call.body).map(|r| r.to_json())
    }

    fn answer_without_effect(&self, call: &Call<'_>) -> Option<Synthetic> {
        // git sends a large push chunked, after probing the URL with a lone flush packet
        // (remote-curl.c `probe_rpc`); receive-pack reads no command from it and does nothing.
        (call.method == "POST"
            && call.path().ends_with("/git-receive-pack")
            && call.body == b"0000")
            .then(|| Synthetic {
                status: 200,
                headers: vec![
                    (
                        "content-type".into(),
                        "application/x-git-receive-pack-result".into(),
                    ),
                    ("cache-control".into(), "no-cache".into()),
                ],
                body: Vec::new(),
            })
    }

    fn respond(&self, call: &Call<'_>, _effect: &Effect) -> Synthetic {
        let push = parse_push(call.body).unwrap_or_default();
        Synthetic {
            status: 200,
            headers: vec![
                (
                    "content-type".into(),
                    "application/x-git-receive-pack-result".into(),
                ),
                ("cache-control".into(), "no-cache".into()),
            ],
            body: accepted_report(&push),
        }
    }

    fn release_failure(&self, call: &Call<'_>, status: u16, body: &[u8]) -> Option<String> {
        if status >= 400 {
            return None;
        }
        let push = parse_push(call.body)?;
        check_report(&push, body).err()
    }

    fn compensations(&self, call: &Call<'_>, _response: &[u8]) -> Vec<Compensation> {
        let Some(push) = parse_push(call.body) else {
            return Vec::new();
        };
        // Put every ref back where the push found it: delete created refs, force the
        // others back to their old value (the objects are already there: an empty pack).
        let mut body = Vec::new();
        let mut needs_pack = false;
        for (i, command) in push.commands.iter().rev().enumerate() {
            let mut line = format!("{} {} {}", command.new, command.old, command.name);
            if i == 0 {
                line.push_str("\0report-status");
            }
            line.push('\n');
            needs_pack |= command.old != ZERO_ID;
            body.extend(pkt_line(line.as_bytes()));
        }
        body.extend_from_slice(b"0000");
        if needs_pack {
            body.extend_from_slice(EMPTY_PACK);
        }
        let undo: Vec<String> = push
            .commands
            .iter()
            .map(|c| {
                if c.old == ZERO_ID {
                    format!("delete {}", c.name)
                } else {
                    format!("reset {} to {}", c.name, short(&c.old))
                }
            })
            .collect();
        vec![Compensation {
            method: "POST".into(),
            url: call.url.to_owned(),
            content_type: Some("application/x-git-receive-pack-request".into()),
            body,
            summary: format!("undo push (approximate): {}", undo.join(", ")),
        }]
    }
}
