//! A body's content coding and charset: what the bytes are before any text view is taken.
//!
//! - **Content codings** (RFC 9110 §8.4.1): `gzip`/`x-gzip` (RFC 1952), `deflate` as the
//!   zlib format (RFC 1950) or, as some clients send it, raw deflate (RFC 1951), each up to
//!   [`MAX_DECODED_BYTES`]; several codings are undone in the reverse of the order listed.
//!   A body with no `Content-Encoding` is sniffed for the gzip magic bytes and for a zlib
//!   header (RFC 1950 §2.2: compression method 8, a window of at most 32 KiB, `FCHECK`
//!   making the first two bytes a multiple of 31, no preset dictionary). `br` and `zstd`
//!   are not decoded (no decoder is built in: it would add a crate for two codings that
//!   agents rarely send), nor is any other coding: such a body is [`Decoded::unanalysed`].
//! - **Charsets**: UTF-8 (a BOM is dropped); UTF-16 and UTF-32, little or big endian, by
//!   their byte-order mark (Unicode §23.8) or, with none, by the zero bytes ASCII text
//!   leaves in every other (or three of every four) byte; Latin-1 (ISO-8859-1) when the
//!   bytes are not UTF-8 but every one is printable in it. Anything else that is no known
//!   container (a git pack) is binary: analysed as lossy text still, but marked.

use std::borrow::Cow;
use std::io::Read as _;

use super::MAX_DECODED_BYTES;

/// A body after its content codings.
#[derive(Debug)]
pub(super) struct Decoded<'a> {
    /// The decoded bytes (the input when nothing was decoded).
    pub bytes: Cow<'a, [u8]>,
    /// The view-name prefix naming the decodings (`gzip+`, `deflate+`, `zlib+`, or empty).
    pub prefix: String,
    /// A decoding stopped at [`MAX_DECODED_BYTES`].
    pub cut: bool,
    /// Why the body could not be decoded whole, when it could not: lineage is then
    /// incomplete (the `unanalysed` flow label).
    pub unanalysed: Option<String>,
}

/// Undoes `content_encoding` (the header's value, if any) on `input`, or sniffs gzip and
/// zlib when it is absent. A coding that cannot be undone leaves the bytes as they were
/// at that step and says why in [`Decoded::unanalysed`].
pub(super) fn content_decode<'a>(input: &'a [u8], content_encoding: Option<&str>) -> Decoded<'a> {
    let mut out = Decoded {
        bytes: Cow::Borrowed(input),
        prefix: String::new(),
        cut: false,
        unanalysed: None,
    };
    let codings: Vec<String> = content_encoding
        .unwrap_or("")
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    if codings.is_empty() {
        if input.starts_with(&[0x1f, 0x8b]) {
            match gunzip(input) {
                Ok((bytes, cut)) => {
                    out.bytes = Cow::Owned(bytes);
                    out.prefix = "gzip+".into();
                    out.cut = cut;
                }
                Err(reason) => {
                    out.unanalysed = Some(format!(
                    "the body starts as gzip but did not decode ({reason}); analysed as raw bytes"
                ))
                }
            }
        } else if zlib_header(input) {
            // Text can start with `x^` (0x78 0x5e) too: only a stream that inflates is zlib.
            if let Ok((bytes, cut)) = capped(flate2::read::ZlibDecoder::new(input)) {
                out.bytes = Cow::Owned(bytes);
                out.prefix = "zlib+".into();
                out.cut = cut;
            }
        }
        return out;
    }
    for coding in codings.iter().rev() {
        let step = match coding.as_str() {
            "gzip" | "x-gzip" => gunzip(&out.bytes).map(|d| (d, "gzip+")),
            "deflate" => inflate_zlib_or_raw(&out.bytes).map(|d| (d, "deflate+")),
            "br" | "zstd" => Err(format!(
                "Content-Encoding {coding} is not decoded by lineage (no {coding} decoder is built in)"
            )),
            other => Err(format!(
                "Content-Encoding {other:?} is not one lineage decodes (gzip, x-gzip, deflate)"
            )),
        };
        match step {
            Ok(((bytes, cut), name)) => {
                out.bytes = Cow::Owned(bytes);
                out.prefix.push_str(name);
                out.cut |= cut;
            }
            Err(reason) => {
                let reason = if reason.starts_with("Content-Encoding") {
                    reason
                } else {
                    format!("the {coding} body did not decode ({reason})")
                };
                out.unanalysed = Some(format!("{reason}; analysed as raw bytes"));
                break;
            }
        }
    }
    out
}

/// The body after its content codings and charset , the prefix naming the
/// decodings, and notes in `analysis`: `truncated` when a bound cut it, `skipped` when a
/// coding could not be undone or the body is binary (the effect is then `unanalysed`).
pub(super) fn decode_body<'a>(
    body: &'a [u8],
    content_encoding: Option<&str>,
    analysis: &mut super::Analysis,
) -> (std::borrow::Cow<'a, [u8]>, String) {
    let mut input = body;
    if input.len() > super::MAX_INPUT_BYTES {
        input = &input[..super::MAX_INPUT_BYTES];
        analysis.truncated = true;
    }
    let decoded = content_decode(input, content_encoding);
    analysis.truncated |= decoded.cut;
    if let Some(reason) = decoded.unanalysed {
        analysis.skipped = Some(reason);
        return (decoded.bytes, decoded.prefix);
    }
    let bytes = decoded.bytes;
    if let Some((charset, text)) = transcode(&bytes) {
        return (
            std::borrow::Cow::Owned(text.into_bytes()),
            format!("{}{charset}+", decoded.prefix),
        );
    }
    let pack = super::containers::pack_start(&bytes).is_some_and(|p| p.starts_with(b"PACK"));
    if !pack && !is_utf8_text(&bytes) {
        analysis.skipped = Some(BINARY.to_owned());
    }
    (bytes, decoded.prefix)
}

/// Whether `bytes` start with a zlib header (RFC 1950 §2.2): CM = 8, CINFO ≤ 7, the first
/// two bytes a multiple of 31 as a big-endian number, and no preset dictionary.
pub(super) fn zlib_header(bytes: &[u8]) -> bool {
    let [cmf, flg, ..] = bytes else {
        return false;
    };
    cmf & 0x0f == 8
        && cmf >> 4 <= 7
        && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        && flg & 0x20 == 0
}

/// Inflates a gzip member sequence (RFC 1952) up to [`MAX_DECODED_BYTES`]; `true` when cut.
///
/// Errors: the stream does not decode (the reason).
pub(super) fn gunzip(input: &[u8]) -> Result<(Vec<u8>, bool), String> {
    capped(flate2::read::MultiGzDecoder::new(input))
}

/// Inflates `Content-Encoding: deflate`: the zlib format (RFC 1950) as RFC 9110 §8.4.1.2
/// defines it, or raw deflate (RFC 1951) when the zlib header is missing.
///
/// Errors: neither decodes (the zlib reason).
pub(super) fn inflate_zlib_or_raw(input: &[u8]) -> Result<(Vec<u8>, bool), String> {
    capped(flate2::read::ZlibDecoder::new(input)).or_else(|zlib| {
        if zlib_header(input) {
            return Err(zlib);
        }
        capped(flate2::read::DeflateDecoder::new(input)).map_err(|_| zlib)
    })
}

/// Inflates a zlib stream (RFC 1950) up to [`MAX_DECODED_BYTES`].
///
/// Errors: it does not decode.
pub(super) fn inflate_zlib(input: &[u8]) -> Result<(Vec<u8>, bool), String> {
    capped(flate2::read::ZlibDecoder::new(input))
}

fn capped(reader: impl std::io::Read) -> Result<(Vec<u8>, bool), String> {
    let mut out = Vec::new();
    reader
        .take(MAX_DECODED_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    let cut = out.len() > MAX_DECODED_BYTES;
    out.truncate(MAX_DECODED_BYTES);
    Ok((out, cut))
}

/// `bytes` in another charset than UTF-8, transcoded: `(name, text)` with `name` one of
/// `utf-32le`, `utf-32be`, `utf-16le`, `utf-16be`, `latin-1`. `None` for UTF-8 (or
/// ASCII) and for bytes that are text in none of them.
pub(super) fn transcode(bytes: &[u8]) -> Option<(&'static str, String)> {
    if bytes.len() < 4 {
        return None;
    }
    let bom32 = match bytes {
        [0xff, 0xfe, 0, 0, ..] => Some(false),
        [0, 0, 0xfe, 0xff, ..] => Some(true),
        _ => None,
    };
    let bom16 = match bytes {
        [0xff, 0xfe, ..] if bom32.is_none() => Some(false),
        [0xfe, 0xff, ..] => Some(true),
        _ => None,
    };
    if let Some(big) = bom32.or_else(|| zero_pattern(bytes, 4)) {
        if let Some(text) = utf32(bytes, big).filter(|t| mostly_printable(t)) {
            return Some((if big { "utf-32be" } else { "utf-32le" }, text));
        }
    }
    if let Some(big) = bom16.or_else(|| zero_pattern(bytes, 2)) {
        if let Some(text) = utf16(bytes, big).filter(|t| mostly_printable(t)) {
            return Some((if big { "utf-16be" } else { "utf-16le" }, text));
        }
    }
    if std::str::from_utf8(bytes).is_err() && latin1_text(bytes) {
        return Some(("latin-1", bytes.iter().map(|&b| char::from(b)).collect()));
    }
    None
}

/// The byte order ASCII-range text in units of `width` bytes shows by its zero bytes:
/// `Some(false)` little endian (the high bytes, last in each unit, are zero), `Some(true)`
/// big endian, judged on the first 4 KiB.
fn zero_pattern(bytes: &[u8], width: usize) -> Option<bool> {
    let sample = &bytes[..bytes.len().min(4096)];
    let units = sample.len() / width;
    if units < 2 {
        return None;
    }
    let zero_at = |offset: usize| {
        sample
            .chunks_exact(width)
            .filter(|unit| unit[offset] == 0)
            .count()
    };
    let high_zero = |offsets: std::ops::Range<usize>| offsets.map(zero_at).min().unwrap_or(0);
    let (first, last) = (zero_at(0), zero_at(width - 1));
    if width == 4 {
        if high_zero(1..4) * 10 >= units * 9 && first * 10 < units {
            return Some(false);
        }
        if high_zero(0..3) * 10 >= units * 9 && last * 10 < units {
            return Some(true);
        }
        return None;
    }
    if last * 10 >= units * 6 && first * 10 < units {
        Some(false)
    } else if first * 10 >= units * 6 && last * 10 < units {
        Some(true)
    } else {
        None
    }
}

fn utf16(bytes: &[u8], big: bool) -> Option<String> {
    let units = bytes.chunks_exact(2).map(|pair| {
        let pair = [pair[0], pair[1]];
        if big {
            u16::from_be_bytes(pair)
        } else {
            u16::from_le_bytes(pair)
        }
    });
    let text: String = char::decode_utf16(units)
        .map(|c| c.unwrap_or('\u{fffd}'))
        .collect();
    Some(text.trim_start_matches('\u{feff}').to_owned())
}

fn utf32(bytes: &[u8], big: bool) -> Option<String> {
    let text: String = bytes
        .chunks_exact(4)
        .map(|unit| {
            let unit = [unit[0], unit[1], unit[2], unit[3]];
            let code = if big {
                u32::from_be_bytes(unit)
            } else {
                u32::from_le_bytes(unit)
            };
            char::from_u32(code).unwrap_or('\u{fffd}')
        })
        .collect();
    Some(text.trim_start_matches('\u{feff}').to_owned())
}

/// At least 90% of the characters are printable or whitespace, and at most 1% replacement
/// characters.
fn mostly_printable(text: &str) -> bool {
    let (mut all, mut printable, mut replaced) = (0usize, 0usize, 0usize);
    for c in text.chars() {
        all += 1;
        if !c.is_control() || c.is_whitespace() {
            printable += 1;
        }
        if c == '\u{fffd}' {
            replaced += 1;
        }
    }
    all > 0 && printable * 10 >= all * 9 && replaced * 100 <= all
}

/// Every byte is printable ASCII, whitespace, or in Latin-1's printable upper half.
fn latin1_text(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|&b| matches!(b, 0x20..=0x7e | b'\t' | b'\n' | b'\r' | 0xa0..=0xff))
}

/// Whether `bytes` (a body after its content codings) are text: UTF-8 (a character cut at
/// the end by the input bound allowed) that is [`mostly_printable`].
pub(super) fn is_utf8_text(bytes: &[u8]) -> bool {
    let valid = match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(error) if error.error_len().is_none() => {
            Cow::Owned(String::from_utf8_lossy(&bytes[..error.valid_up_to()]).into_owned())
        }
        Err(_) => return false,
    };
    valid.is_empty() || mostly_printable(&valid)
}

/// The reason a binary body is marked: it ends in "is not text", which a read's record
/// uses for bodies that are not text (lineage.rs does not hold those against effects).
pub(super) const BINARY: &str =
    "not analysed: the body is neither text in a known charset (UTF-8, UTF-16, UTF-32, Latin-1) nor a container lineage reads (gzip, zlib, deflate, a git pack): binary content is not text";

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).expect("zlib");
        e.finish().expect("zlib")
    }

    fn raw_deflate(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).expect("deflate");
        e.finish().expect("deflate")
    }

    #[test]
    fn deflate_is_read_as_zlib_or_raw_and_zlib_is_sniffed() {
        let text = b"the customer list of the northern region, row after row";
        for body in [zlib(text), raw_deflate(text)] {
            let decoded = content_decode(&body, Some("deflate"));
            assert_eq!(&*decoded.bytes, text);
            assert_eq!(decoded.prefix, "deflate+");
            assert!(decoded.unanalysed.is_none());
        }
        let zlibbed = zlib(text);
        let sniffed = content_decode(&zlibbed, None);
        assert_eq!(
            (&*sniffed.bytes, sniffed.prefix.as_str()),
            (&text[..], "zlib+")
        );
        // Text that happens to start like a zlib header is text.
        assert!(zlib_header(b"x^2 + y^2"));
        let plain = content_decode(b"x^2 + y^2 = z^2", None);
        assert_eq!(plain.prefix, "");
        assert!(plain.unanalysed.is_none());
        // gzip over deflate, undone in reverse order.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&zlib(text)).expect("gzip");
        let gzipped = gz.finish().expect("gzip");
        let both = content_decode(&gzipped, Some("deflate, gzip"));
        assert_eq!(&*both.bytes, text);
        assert_eq!(both.prefix, "gzip+deflate+");
    }

    #[test]
    fn codings_that_cannot_be_undone_say_why() {
        let broken = content_decode(b"\x78\x9c not a stream", Some("deflate"));
        assert!(
            broken
                .unanalysed
                .as_deref()
                .is_some_and(|r| r.contains("deflate body did not decode")),
            "{broken:?}"
        );
        for coding in ["br", "zstd", "compress", "x-custom"] {
            let decoded = content_decode(b"abc", Some(coding));
            let reason = decoded.unanalysed.expect("unanalysed");
            assert!(reason.contains(coding), "{reason}");
        }
        assert!(content_decode(b"abc", Some("identity"))
            .unanalysed
            .is_none());
    }

    #[test]
    fn utf16_utf32_and_latin1_are_transcoded() {
        let text = "ghp_secretvalue in a UTF text é";
        let le16: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let be16: Vec<u8> = text.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let mut bom16 = vec![0xff, 0xfe];
        bom16.extend_from_slice(&le16);
        assert_eq!(transcode(&le16), Some(("utf-16le", text.to_owned())));
        assert_eq!(transcode(&be16), Some(("utf-16be", text.to_owned())));
        assert_eq!(transcode(&bom16), Some(("utf-16le", text.to_owned())));
        let le32: Vec<u8> = text
            .chars()
            .flat_map(|c| (c as u32).to_le_bytes())
            .collect();
        let mut be32 = vec![0, 0, 0xfe, 0xff];
        be32.extend(text.chars().flat_map(|c| (c as u32).to_be_bytes()));
        assert_eq!(transcode(&le32), Some(("utf-32le", text.to_owned())));
        assert_eq!(transcode(&be32), Some(("utf-32be", text.to_owned())));
        assert_eq!(
            transcode(b"caf\xe9 cr\xe8me"),
            Some(("latin-1", "café crème".to_owned()))
        );
        assert_eq!(transcode(text.as_bytes()), None);
        let random: Vec<u8> = (0..512u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(transcode(&random), None);
        assert!(!is_utf8_text(&random));
        assert!(is_utf8_text("plain text, ünïcode".as_bytes()));
        assert!(
            is_utf8_text(&"é".as_bytes()[..1]),
            "a character cut by the bound"
        );
    }
}
