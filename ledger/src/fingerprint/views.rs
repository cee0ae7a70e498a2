//! Text views added for encodings an agent can hide a read's data in without compressing
//! or encrypting it: character references, zero-width characters, base64 wrapped at any
//! line width, base32, and hex with separators. Each function looks at one text and
//! returns what it decodes to (nothing when the text holds no such form); the caller
//! bounds depth, views and tokens as for every other view.

use base64::Engine as _;

/// Most decodings of one kind taken from one text.
const MAX_RUNS: usize = 64;
/// Fewest characters of a joined base64 or base32 block, or bytes of a separated hex run.
const MIN_ENCODED: usize = 24;
/// Fewest bytes a separated hex run decodes to.
const MIN_HEX_BYTES: usize = 12;

/// `text` with its XML and HTML character references resolved, when it has any: decimal
/// and hexadecimal numeric references (`&#112;`, `&#x70;`; the `;` may be missing, as
/// HTML parsers accept, HTML Living Standard §13.2.5.80) and the named references of the
/// HTML Living Standard §13.5 for ASCII punctuation and the most common symbols (the
/// five XML ones among them, XML 1.0 §4.6). Other names are left as written.
pub(crate) fn character_references(text: &str) -> Option<String> {
    if !text.contains('&') {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match reference(rest) {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
                changed = true;
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// The character a reference at the start of `text` (`&…`) stands for, and its length.
fn reference(text: &str) -> Option<(char, usize)> {
    let body = &text[1..];
    if let Some(number) = body.strip_prefix('#') {
        let (digits, radix, skip) = match number.strip_prefix(['x', 'X']) {
            Some(hex) => (hex, 16, 3),
            None => (number, 10, 2),
        };
        let len = digits
            .bytes()
            .take(8)
            .take_while(|b| (*b as char).is_digit(radix))
            .count();
        if len == 0 {
            return None;
        }
        let code = u32::from_str_radix(&digits[..len], radix).ok()?;
        let c = char::from_u32(code).unwrap_or('\u{fffd}');
        let semicolon = usize::from(digits.as_bytes().get(len) == Some(&b';'));
        return Some((c, 1 + skip - 1 + len + semicolon));
    }
    let end = body.bytes().take(10).position(|b| b == b';')?;
    let c = named(&body[..end])?;
    Some((c, end + 2))
}

/// Named character references (HTML Living Standard §13.5) for ASCII punctuation and
/// common symbols.
fn named(name: &str) -> Option<char> {
    Some(match name {
        "amp" | "AMP" => '&',
        "lt" | "LT" => '<',
        "gt" | "GT" => '>',
        "quot" | "QUOT" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        "Tab" => '\t',
        "NewLine" => '\n',
        "excl" => '!',
        "num" => '#',
        "dollar" => '$',
        "percnt" => '%',
        "lpar" => '(',
        "rpar" => ')',
        "ast" | "midast" => '*',
        "plus" => '+',
        "comma" => ',',
        "period" => '.',
        "sol" => '/',
        "colon" => ':',
        "semi" => ';',
        "equals" => '=',
        "quest" => '?',
        "commat" => '@',
        "lsqb" | "lbrack" => '[',
        "bsol" => '\\',
        "rsqb" | "rbrack" => ']',
        "Hat" => '^',
        "lowbar" | "UnderBar" => '_',
        "grave" | "DiacriticalGrave" => '`',
        "lcub" | "lbrace" => '{',
        "verbar" | "vert" | "VerticalLine" => '|',
        "rcub" | "rbrace" => '}',
        "hyphen" | "dash" => '\u{2010}',
        "ndash" => '\u{2013}',
        "mdash" => '\u{2014}',
        "lsquo" => '\u{2018}',
        "rsquo" => '\u{2019}',
        "ldquo" => '\u{201c}',
        "rdquo" => '\u{201d}',
        "hellip" => '\u{2026}',
        "copy" => '\u{a9}',
        "reg" => '\u{ae}',
        "trade" => '\u{2122}',
        "euro" => '\u{20ac}',
        "pound" => '\u{a3}',
        "yen" => '\u{a5}',
        "cent" => '\u{a2}',
        "sect" => '\u{a7}',
        "deg" => '\u{b0}',
        "middot" => '\u{b7}',
        "bull" => '\u{2022}',
        "times" => '\u{d7}',
        "divide" => '\u{f7}',
        _ => return None,
    })
}

/// Characters that render as nothing: ZERO WIDTH SPACE, NON-JOINER and JOINER
/// (U+200B–U+200D), WORD JOINER (U+2060), the invisible operators (U+2061–U+2064), SOFT
/// HYPHEN (U+00AD) and ZERO WIDTH NO-BREAK SPACE (U+FEFF, the BOM).
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{ad}' | '\u{feff}')
}

/// `text` with every invisible character removed, when it has any: a word with zero-width
/// joiners between its letters tokenises as the word again.
pub(crate) fn without_invisible(text: &str) -> Option<String> {
    if text.is_ascii() || !text.chars().any(invisible) {
        return None;
    }
    Some(text.chars().filter(|c| !invisible(*c)).collect())
}

/// Blocks of lines wrapped at one width: two or more consecutive lines of the same
/// length (at least 8 characters) made only of characters `alphabet` accepts, the last
/// line of the block shorter or as long; each block joined (at least [`MIN_ENCODED`]
/// characters), at most [`MAX_RUNS`]. This is how base64 (RFC 2045 §6.8 wraps at 76, PEM
/// at 64), base32 and hex dumps are wrapped, at whatever width.
fn wrapped_blocks(text: &str, alphabet: impl Fn(char) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, out: &mut Vec<String>| {
        if block.len() >= 2 {
            let joined: String = block.concat();
            if joined.len() >= MIN_ENCODED {
                out.push(joined);
            }
        }
        block.clear();
    };
    for line in text.lines() {
        let line = line.trim();
        let fits = line.len() >= 4 && line.chars().all(&alphabet);
        let width = block.first().map(|first| first.len());
        let continues = fits
            && match width {
                None => line.len() >= 8,
                // Same width as the block's lines, and no short line before it.
                Some(width) => {
                    line.len() <= width && block.last().is_some_and(|last| last.len() == width)
                }
            };
        if continues {
            block.push(line);
        } else {
            flush(&mut block, &mut out);
            if fits && line.len() >= 8 {
                block.push(line);
            }
        }
        if out.len() >= MAX_RUNS {
            return out;
        }
    }
    flush(&mut block, &mut out);
    out
}

/// What base64 wrapped over several lines decodes to (standard or URL-safe alphabet,
/// RFC 4648 §4 and §5), when that is text or a gzip or zlib stream.
pub(crate) fn wrapped_base64(text: &str) -> Vec<Vec<u8>> {
    let alphabet = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_');
    wrapped_blocks(text, alphabet)
        .iter()
        .filter_map(|block| super::decode::decode_base64(block))
        .collect()
}

/// What hex wrapped over several lines decodes to, when that is text or a compressed
/// stream.
pub(crate) fn wrapped_hex(text: &str) -> Vec<Vec<u8>> {
    wrapped_blocks(text, |c| c.is_ascii_hexdigit())
        .iter()
        .filter_map(|block| super::containers::decode_hex(&block[..block.len() & !1]))
        .collect()
}

/// What base32 (RFC 4648 §6: `A`–`Z`, `2`–`7`, `=` padding; in one case throughout, padding
/// optional) decodes to, when that is text or a compressed stream: runs of at least
/// [`MIN_ENCODED`] characters, and blocks wrapped over several lines (any width).
pub(crate) fn base32(text: &str) -> Vec<Vec<u8>> {
    let upper = |c: char| matches!(c, 'A'..='Z' | '2'..='7' | '=');
    let lower = |c: char| matches!(c, 'a'..='z' | '2'..='7' | '=');
    let mut candidates: Vec<String> = Vec::new();
    for alphabet in [&upper as &dyn Fn(char) -> bool, &lower] {
        let mut start = None;
        // Byte by byte: the alphabets are ASCII, so a byte of a multi-byte character is
        // never in one, and the runs' boundaries are the same as by characters.
        let bytes = text.as_bytes();
        for i in 0..=bytes.len() {
            let c = bytes
                .get(i)
                .map_or(' ', |&b| if b.is_ascii() { b as char } else { ' ' });
            // Padding ends a value, never starts one (`key=VALUE`).
            if i < bytes.len() && alphabet(c) && (start.is_some() || c != '=') {
                start.get_or_insert(i);
            } else if let Some(s) = start.take() {
                // A run inside a longer word of other letters is no base32 value.
                let glued = text[..s]
                    .chars()
                    .next_back()
                    .is_some_and(char::is_alphanumeric)
                    || text[i..].chars().next().is_some_and(char::is_alphanumeric);
                if i - s >= MIN_ENCODED && !glued {
                    candidates.push(text[s..i].to_owned());
                }
            }
        }
        candidates.extend(wrapped_blocks(text, alphabet));
    }
    candidates.truncate(MAX_RUNS);
    candidates
        .iter()
        .filter_map(|run| decode_base32(run))
        .filter_map(super::containers::printable_or_gzip)
        .collect()
}

/// Decodes RFC 4648 §6 base32 (either case, padding optional). `None` on a character
/// outside the alphabet or a length no encoder produces.
pub(crate) fn decode_base32(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    if matches!(text.len() % 8, 1 | 3 | 6) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let (mut buffer, mut bits) = (0u64, 0u32);
    for c in text.bytes() {
        let value = match c.to_ascii_uppercase() {
            c @ b'A'..=b'Z' => c - b'A',
            c @ b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        buffer = buffer << 5 | u64::from(value);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// What hex with separators decodes to: pairs of hex digits each followed by one
/// separator — whitespace (any run, so a dump wrapped over lines stays one run), `:`,
/// `-`, `,` or `, ` — or each written `\xHH` or `0xHH` (separated as before); runs of at
/// least [`MIN_HEX_BYTES`] bytes that are text or a compressed stream, at most
/// [`MAX_RUNS`].
pub(crate) fn separated_hex(text: &str) -> Vec<Vec<u8>> {
    let bytes = text.as_bytes();
    let digit = |i: usize| bytes.get(i).and_then(|b| (*b as char).to_digit(16));
    let pair = |i: usize| Some((digit(i)? << 4 | digit(i + 1)?) as u8);
    let mut out = Vec::new();
    let mut at = 0;
    // Whether `prefix` (empty, `\\x`, `0x` or `0X`) is at `i`, compared byte by byte
    // (this runs for every position of every text view).
    let prefixed = |i: usize, prefix: &[u8]| match prefix {
        [] => true,
        [a, b] => bytes.get(i) == Some(a) && bytes.get(i + 1) == Some(b),
        _ => bytes[i.min(bytes.len())..].starts_with(prefix),
    };
    while at + 2 < bytes.len() && out.len() < MAX_RUNS {
        // A run glued to a word before it is none (`sha256deadbeef`): skip before anything.
        if at > 0 && bytes[at - 1].is_ascii_alphanumeric() {
            at += 1;
            continue;
        }
        let prefix: &[u8] = match (bytes[at], bytes.get(at + 1)) {
            (b'\\', Some(b'x')) => b"\\x",
            (b'0', Some(b'x' | b'X')) => &bytes[at..at + 2],
            _ => b"",
        };
        if pair(at + prefix.len()).is_none() {
            at += 1;
            continue;
        }
        let (mut run, mut i, mut separator) = (Vec::new(), at, None::<u8>);
        while prefixed(i, prefix) {
            let Some(byte) = pair(i + prefix.len()) else {
                break;
            };
            // Two digits exactly: `beef` is no pair followed by a separator.
            if prefix.is_empty() && digit(i + 2).is_some() {
                break;
            }
            run.push(byte);
            i += prefix.len() + 2;
            let sep = match bytes.get(i) {
                Some(b) if b.is_ascii_whitespace() => b' ',
                Some(b @ (b':' | b'-' | b',')) => *b,
                Some(b'\\') if prefix == b"\\x" => b'\\',
                _ => break,
            };
            if separator.is_some_and(|s| s != sep) {
                break;
            }
            separator = Some(sep);
            if sep != b'\\' {
                i += 1;
            }
            while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
                i += 1;
            }
        }
        let separated = separator.is_some() || !prefix.is_empty();
        if separated && run.len() >= MIN_HEX_BYTES {
            if let Some(decoded) = super::containers::printable_or_gzip(run) {
                out.push(decoded);
            }
            at = i.max(at + 1);
        } else {
            at += 1;
        }
    }
    out
}

/// The base64 value of a whole short token, as the URL-safe and standard engines decode it
/// without padding (for tests and for callers that already cut a value out).
pub(crate) fn decode_unpadded(token: &str) -> Option<Vec<u8>> {
    let token = token.trim_end_matches('=');
    [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ]
    .iter()
    .find_map(|engine| engine.decode(token).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "the northern region revenue numbers are confidential";

    fn text(bytes: &[u8]) -> String {
        String::from_utf8(bytes.to_vec()).expect("text")
    }

    #[test]
    fn character_references_numeric_and_named_are_resolved() {
        let numeric: String = SECRET.chars().map(|c| format!("&#{};", c as u32)).collect();
        assert_eq!(character_references(&numeric).as_deref(), Some(SECRET));
        let hex: String = SECRET
            .chars()
            .map(|c| format!("&#x{:X}", c as u32))
            .collect();
        assert_eq!(
            character_references(&hex).as_deref(),
            Some(SECRET),
            "no semicolons"
        );
        assert_eq!(
            character_references("a&lowbar;b&colon;&amp;&bogus;&").as_deref(),
            Some("a_b:&&bogus;&")
        );
        assert_eq!(character_references("fish & chips"), None);
    }

    #[test]
    fn zero_width_characters_are_removed() {
        let hidden: String = SECRET
            .chars()
            .flat_map(|c| [c, '\u{200b}'])
            .chain(['\u{200d}', '\u{2060}', '\u{feff}', '\u{200c}'])
            .collect();
        assert_eq!(without_invisible(&hidden).as_deref(), Some(SECRET));
        assert_eq!(without_invisible(SECRET), None);
        assert_eq!(without_invisible("naïve café"), None);
    }

    #[test]
    fn base64_and_hex_wrapped_at_any_width_are_joined() {
        let encoded = base64::engine::general_purpose::STANDARD.encode(SECRET);
        for width in [8, 20, 64] {
            let wrapped: Vec<&str> = encoded
                .as_bytes()
                .chunks(width)
                .map(|c| std::str::from_utf8(c).expect("ascii"))
                .collect();
            let body = format!("attachment:\n{}\nend", wrapped.join("\r\n"));
            let found = wrapped_base64(&body);
            assert_eq!(found.len(), 1, "{width}");
            assert_eq!(text(&found[0]), SECRET);
        }
        let hex: String = SECRET.bytes().map(|b| format!("{b:02x}")).collect();
        let wrapped: Vec<&str> = hex
            .as_bytes()
            .chunks(30)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        assert_eq!(text(&wrapped_hex(&wrapped.join("\n"))[0]), SECRET);
        // Prose lines are no block.
        assert!(wrapped_base64("hello there\nfriends all\nof mine").is_empty());
    }

    #[test]
    fn base32_in_either_case_wrapped_or_not_is_decoded() {
        // RFC 4648 §10 test vector.
        assert_eq!(
            decode_base32("MZXW6YTBOI======").as_deref(),
            Some(&b"foobar"[..])
        );
        let encoded = encode_base32(SECRET.as_bytes());
        assert_eq!(text(&base32(&format!("x={encoded}&y=1"))[0]), SECRET);
        let lower = encoded.to_ascii_lowercase();
        assert_eq!(text(&base32(&format!("\"{lower}\""))[0]), SECRET);
        let wrapped: Vec<&str> = encoded
            .as_bytes()
            .chunks(20)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        assert_eq!(text(&base32(&wrapped.join("\n"))[0]), SECRET);
        assert!(base32("THE QUICK BROWN FOX JUMPED OVER THE LAZY DOGS AGAIN").is_empty());
    }

    fn encode_base32(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        let mut out = String::new();
        let (mut buffer, mut bits) = (0u32, 0u32);
        for &b in bytes {
            buffer = buffer << 8 | u32::from(b);
            bits += 8;
            while bits >= 5 {
                bits -= 5;
                out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
            }
        }
        if bits > 0 {
            out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
        }
        out
    }

    #[test]
    fn hex_with_separators_is_decoded() {
        let bytes = SECRET.as_bytes();
        let spaced: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(text(&separated_hex(&spaced.join(" "))[0]), SECRET);
        assert_eq!(text(&separated_hex(&spaced.join(":"))[0]), SECRET);
        assert_eq!(text(&separated_hex(&spaced.join(", "))[0]), SECRET);
        let lines: Vec<String> = spaced.chunks(16).map(|c| c.join(" ")).collect();
        assert_eq!(text(&separated_hex(&lines.join("\n"))[0]), SECRET);
        let escaped: String = bytes.iter().map(|b| format!("\\x{b:02X}")).collect();
        assert_eq!(text(&separated_hex(&escaped)[0]), SECRET);
        let prefixed: Vec<String> = bytes.iter().map(|b| format!("0x{b:02x}")).collect();
        assert_eq!(text(&separated_hex(&prefixed.join(", "))[0]), SECRET);
        // A MAC address or a short id is no text.
        assert!(separated_hex("00:1a:2b:3c:4d:5e and ab-cd").is_empty());
    }
}
