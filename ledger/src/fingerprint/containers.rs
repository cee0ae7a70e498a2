//! Bodies that hold other bodies: hex runs, multipart/form-data parts, git receive-pack
//! requests (pkt-lines and a PACK whose objects are zlib streams), and delimited text
//! (CSV/TSV) whose cells are values. Every walk here is bounded (parts, objects, bytes).

use std::io::Read as _;

use super::MAX_DECODED_BYTES;

/// Most parts of one multipart body analysed.
pub const MAX_PARTS: usize = 64;
/// Most objects of one pack analysed.
pub const MAX_PACK_OBJECTS: usize = 1024;

/// Runs of at least 32 hex digits (even length), at most 64 of them.
pub(super) fn hex_runs(text: &str) -> Vec<&str> {
    let mut runs = Vec::new();
    let mut start = None;
    let bytes = text.as_bytes();
    for i in 0..=bytes.len() {
        let hex = i < bytes.len() && bytes[i].is_ascii_hexdigit();
        if hex {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            let len = (i - s) & !1;
            if len >= 32 {
                runs.push(&text[s..s + len]);
                if runs.len() >= 64 {
                    break;
                }
            }
        }
    }
    runs
}

/// Decodes a hex run when the result is mostly printable text or a gzip stream (a
/// digest or random id decodes to binary and is left alone).
pub(super) fn decode_hex(run: &str) -> Option<Vec<u8>> {
    let bytes: Vec<u8> = run
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(text, 16).ok()
        })
        .collect::<Option<_>>()?;
    printable_or_gzip(bytes)
}

/// `bytes` when they are mostly printable UTF-8 text, UTF-16 or UTF-32 text, or start a
/// gzip or zlib stream.
pub(super) fn printable_or_gzip(bytes: Vec<u8>) -> Option<Vec<u8>> {
    if bytes.starts_with(&[0x1f, 0x8b]) || super::encoding::zlib_header(&bytes) {
        return Some(bytes);
    }
    if super::encoding::transcode(&bytes).is_some_and(|(charset, _)| charset != "latin-1") {
        return Some(bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    let printable = text
        .chars()
        .filter(|c| !c.is_control() || c.is_whitespace())
        .count();
    (!bytes.is_empty() && printable * 10 >= text.chars().count() * 9 && !text.contains('\u{fffd}'))
        .then_some(bytes)
}

/// The bodies of a multipart body's parts (boundary taken from its first line), each
/// base64-decoded when its `Content-Transfer-Encoding` says so.
pub(super) fn multipart_parts(body: &[u8]) -> Vec<Vec<u8>> {
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    let body = &body[start..];
    if !body.starts_with(b"--") {
        return Vec::new();
    }
    let line_end = match body.iter().position(|&b| b == b'\n') {
        Some(end) if end <= 202 => end,
        _ => return Vec::new(),
    };
    let boundary = body[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&body[..line_end]);
    if boundary.len() < 3 || boundary.iter().any(|b| b.is_ascii_whitespace()) {
        return Vec::new();
    }
    let mut delimiter = b"\n".to_vec();
    delimiter.extend_from_slice(boundary);
    let mut out = Vec::new();
    let mut rest = &body[line_end + 1..];
    while out.len() < MAX_PARTS {
        let Some(end) = find(rest, &delimiter) else {
            break;
        };
        let part = &rest[..end];
        let part = part.strip_suffix(b"\r").unwrap_or(part);
        // Part headers end at the first blank line.
        let split = find(part, b"\r\n\r\n")
            .map(|at| (at, 4))
            .or_else(|| find(part, b"\n\n").map(|at| (at, 2)));
        if let Some((at, skip)) = split {
            let headers = String::from_utf8_lossy(&part[..at]).to_ascii_lowercase();
            if !headers.contains("content-disposition") && !headers.contains("content-type") {
                break;
            }
            let content = &part[at + skip..];
            if headers.contains("content-transfer-encoding: base64") {
                let compact: String = String::from_utf8_lossy(content)
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                if let Some(decoded) = super::decode::decode_base64(&compact) {
                    out.push(decoded);
                    rest = &rest[end + delimiter.len()..];
                    continue;
                }
            }
            out.push(content.to_vec());
        }
        rest = &rest[end + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An object of a pack worth analysing.
pub(super) struct PackObject {
    /// `blob`, `commit`, `tag`, or `delta` (the literal bytes a delta inserts).
    pub kind: &'static str,
    /// The inflated object (for a delta: its inserted bytes).
    pub data: Vec<u8>,
}

/// The objects of a git pack — a receive-pack request (pkt-line commands up to a flush,
/// then the pack) or a bare pack — as git's `Documentation/gitformat-pack.txt` lays them
/// out. Blobs, commits and tags are inflated whole; trees are skipped; a delta
/// (`OFS_DELTA`, `REF_DELTA`) is not resolved against its base (which may not even be in
/// the pack: pushes are thin), but the bytes it inserts are kept, which is where new
/// content of a changed file is. `None` when the body is not a pack. At most
/// [`MAX_PACK_OBJECTS`] objects and `MAX_DECODED_BYTES` inflated bytes in all.
pub(super) fn pack_objects(body: &[u8]) -> Option<Vec<PackObject>> {
    let pack = pack_start(body)?;
    if pack.len() < 12 || &pack[..4] != b"PACK" {
        return None;
    }
    let version = u32::from_be_bytes([pack[4], pack[5], pack[6], pack[7]]);
    if version != 2 && version != 3 {
        return None;
    }
    let count = u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]) as usize;
    let mut out = Vec::new();
    // A malformed object ends the walk; what was read before it is kept.
    let _ = walk_pack(pack, count, &mut out);
    Some(out)
}

fn walk_pack(pack: &[u8], count: usize, out: &mut Vec<PackObject>) -> Option<()> {
    let mut at = 12;
    let mut inflated_total = 0usize;
    for _ in 0..count.min(MAX_PACK_OBJECTS) {
        let mut byte = *pack.get(at)?;
        at += 1;
        let kind = (byte >> 4) & 7;
        let mut size = u64::from(byte & 0x0f);
        let mut shift = 4;
        while byte & 0x80 != 0 {
            byte = *pack.get(at)?;
            at += 1;
            if shift < 60 {
                size |= u64::from(byte & 0x7f) << shift;
            }
            shift += 7;
        }
        match kind {
            6 => {
                // OFS_DELTA: a variable-length negative offset to the base.
                while *pack.get(at)? & 0x80 != 0 {
                    at += 1;
                }
                at += 1;
            }
            7 => at += 20,
            _ => {}
        }
        if size as usize > MAX_DECODED_BYTES.saturating_sub(inflated_total) {
            break;
        }
        let Some((data, consumed)) = inflate(pack.get(at..)?, size as usize) else {
            break;
        };
        at += consumed;
        inflated_total += data.len();
        let kind = match kind {
            1 => "commit",
            3 => "blob",
            4 => "tag",
            6 | 7 => "delta",
            _ => continue,
        };
        let data = if kind == "delta" {
            delta_inserts(&data)
        } else {
            data
        };
        if !data.is_empty() {
            out.push(PackObject { kind, data });
        }
    }
    Some(())
}

/// Where the pack starts: after the pkt-line commands and their flush, or at once.
pub(super) fn pack_start(body: &[u8]) -> Option<&[u8]> {
    if body.starts_with(b"PACK") {
        return Some(body);
    }
    let mut at = 0;
    for _ in 0..4096 {
        let len = std::str::from_utf8(body.get(at..at + 4)?).ok()?;
        let len = usize::from_str_radix(len, 16).ok()?;
        if len == 0 {
            return body.get(at + 4..);
        }
        if len < 4 {
            return None;
        }
        at += len;
    }
    None
}

/// Inflates one zlib stream that must expand to exactly `size` bytes; the output and the
/// input bytes it took. `None` when it expands to more (or fails).
fn inflate(input: &[u8], size: usize) -> Option<(Vec<u8>, usize)> {
    let mut decoder = flate2::bufread::ZlibDecoder::new(input);
    let mut out = Vec::new();
    (&mut decoder)
        .take(size as u64 + 1)
        .read_to_end(&mut out)
        .ok()?;
    if out.len() > size {
        return None;
    }
    Some((out, decoder.total_in() as usize))
}

/// The literal bytes a git delta inserts (copies from the base are skipped).
fn delta_inserts(delta: &[u8]) -> Vec<u8> {
    let mut at = 0;
    for _ in 0..2 {
        // Base size, result size.
        while delta.get(at).is_some_and(|b| b & 0x80 != 0) {
            at += 1;
        }
        at += 1;
    }
    let mut out = Vec::new();
    while let Some(&cmd) = delta.get(at) {
        at += 1;
        if cmd & 0x80 != 0 {
            at += (cmd & 0x7f).count_ones() as usize;
        } else if cmd > 0 {
            let end = (at + cmd as usize).min(delta.len());
            out.extend_from_slice(&delta[at..end]);
            at = end;
        }
    }
    out
}

/// The cells of delimited text (CSV, `;` or `|` separated; not TSV, whose tabs are
/// whitespace that fingerprints must not depend on): when the first two lines split into
/// the same number (2 or more) of fields on one separator. At most 100,000 cells.
pub(super) fn delimited_cells(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(2000)
        .collect();
    let Some(separator) = separator(&lines) else {
        return Vec::new();
    };
    lines
        .iter()
        .flat_map(|line| line.split(separator))
        .map(|cell| cell.trim().trim_matches('"'))
        .filter(|cell| !cell.is_empty())
        .take(100_000)
        .collect()
}

fn separator(lines: &[&str]) -> Option<char> {
    if lines.len() < 2 {
        return None;
    }
    [',', ';', '|'].into_iter().find(|&sep| {
        let first = lines[0].matches(sep).count();
        first >= 1 && lines[1].matches(sep).count() == first
    })
}

/// The byte range of the header line of delimited text whose header is all names (no
/// digits): column names are a schema that many tables share, not data.
pub(super) fn delimited_header(text: &str) -> Option<std::ops::Range<usize>> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(2)
        .collect();
    separator(&lines)?;
    let start = text.find(lines[0])?;
    let header = lines[0];
    (!header.bytes().any(|b| b.is_ascii_digit())).then(|| start..start + header.len())
}
