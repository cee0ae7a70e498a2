//! Showing text from agents so a reviewer sees what it holds: bidirectional controls,
//! invisible characters and control characters are written as a visible `<U+XXXX>`
//! instead of being passed to the screen, where they would reorder or hide what is shown.
//!
//! An agent chooses request bodies, URLs and the summaries adapters make of them. A
//! right-to-left override (U+202E) makes `exe.txt` read as `txt.exe`; an isolate or
//! embedding moves text across what looks like a field boundary; a zero-width space hides
//! inside a name; ESC starts a terminal escape sequence. This is the "Trojan Source" attack
//! (CVE-2021-42574, Boucher and Anderson 2021) against review. Unicode Technical Report #9
//! (the Bidirectional Algorithm, §2) lists the bidi controls, and Unicode Technical Standard
//! #39 (Security Mechanisms, §3) recommends showing such characters visibly where text is
//! reviewed. The review UI ([`crate::ui`]) and the command line show every one of them
//! escaped, through this module.
//!
//! Escaped ([`is_hidden`]): every `Cc` control character but tab and line feed (and a
//! carriage return right before a line feed), every `Cf` format character (which holds the
//! bidi embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069, the marks
//! U+200E, U+200F and U+061C, the zero-width characters U+200B–U+200D, U+2060–U+2064 and
//! U+FEFF, the soft hyphen and the tag characters), and the line and paragraph separators
//! U+2028 and U+2029 (`Zl`, `Zp`), which break lines where none is shown. The `Cf` table is
//! Unicode 15.1's (`DerivedGeneralCategory.txt`).

use std::borrow::Cow;

/// The `Cf` (format) ranges of Unicode 15.1, inclusive, in order.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is shown escaped wherever it stands: a `Cc` control other than tab and line
/// feed, a `Cf` format character, or U+2028/U+2029. (A carriage return is `Cc`; the
/// escaping functions keep one that comes right before a line feed.)
pub fn is_hidden(c: char) -> bool {
    if c == '\t' || c == '\n' {
        return false;
    }
    if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
        return true;
    }
    let code = u32::from(c);
    if code < 0xAD {
        return false;
    }
    FORMAT
        .binary_search_by(|&(low, high)| {
            if high < code {
                std::cmp::Ordering::Less
            } else if low > code {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The visible form of `c`: `<U+202E>` (at least four upper-case hex digits).
pub fn notation(c: char) -> String {
    format!("<U+{:04X}>", u32::from(c))
}

/// One piece of a text as [`pieces`] cuts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text shown as it is.
    Text(&'a str),
    /// A character shown as its [`notation`].
    Hidden(char),
}

/// `text` cut into runs shown as they are and the characters to show escaped, for
/// renderers that style the escapes (the review UI). With `lines`, a line feed and a
/// carriage return right before one stay text (a block of text); without, they are
/// escaped too (a one-line field, where a line break would forge another line).
pub fn pieces(text: &str, lines: bool) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let kept = if lines {
            !is_hidden(c) || (c == '\r' && chars.peek().is_some_and(|&(_, next)| next == '\n'))
        } else {
            !is_hidden(c) && c != '\n'
        };
        if kept {
            continue;
        }
        if start < at {
            out.push(Piece::Text(&text[start..at]));
        }
        out.push(Piece::Hidden(c));
        start = at + c.len_utf8();
    }
    if start < text.len() {
        out.push(Piece::Text(&text[start..]));
    }
    out
}

fn escape_with(text: &str, lines: bool) -> Cow<'_, str> {
    let pieces = pieces(text, lines);
    if pieces.iter().all(|p| matches!(p, Piece::Text(_))) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8 * pieces.len());
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Hidden(c) => out.push_str(&notation(c)),
        }
    }
    Cow::Owned(out)
}

/// A block of text with every [`is_hidden`] character as its [`notation`]; tabs, line
/// feeds and CR LF pairs stay. Borrowed when there is nothing to escape.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_with(text, true)
}

/// A one-line field (a URL, a summary, a reason, a header value) with every
/// [`is_hidden`] character and every line break as its [`notation`]. Borrowed when there
/// is nothing to escape.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    escape_with(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trojan_source_characters_are_escaped_and_ordinary_text_is_not() {
        for c in [
            '\u{202A}',
            '\u{202B}',
            '\u{202C}',
            '\u{202D}',
            '\u{202E}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{200E}',
            '\u{200F}',
            '\u{2060}',
            '\u{2064}',
            '\u{FEFF}',
            '\u{061C}',
            '\u{00AD}',
            '\u{E0041}',
            '\u{1B}',
            '\u{0}',
            '\u{7F}',
            '\u{85}',
            '\u{2028}',
            '\u{2029}',
            '\r',
        ] {
            assert!(is_hidden(c), "{}", notation(c));
        }
        for c in [
            'a', 'é', 'ש', 'ا', '中', '😀', ' ', '\u{A0}', '\t', '\n', '\u{FE0F}',
        ] {
            assert!(!is_hidden(c), "{}", notation(c));
        }
        assert!(
            FORMAT.windows(2).all(|w| w[0].1 < w[1].0),
            "sorted, disjoint"
        );
    }

    #[test]
    fn escaping_shows_each_character_by_its_code_point() {
        assert_eq!(escape("invoice\u{202E}fdp.exe"), "invoice<U+202E>fdp.exe");
        assert_eq!(escape("a\u{1B}[2Jb"), "a<U+001B>[2Jb");
        assert_eq!(escape("tag\u{E0041}"), "tag<U+E0041>");
        assert!(matches!(escape("plain, שלום, 中文"), Cow::Borrowed(_)));
        // Blocks keep their lines; one-line fields do not.
        assert_eq!(
            escape("one\r\ntwo\nthree\rfour"),
            "one\r\ntwo\nthree<U+000D>four"
        );
        assert_eq!(
            escape_line("one\r\ntwo\tthree"),
            "one<U+000D><U+000A>two\tthree"
        );
        assert_eq!(
            pieces("a\u{2066}b", true),
            vec![
                Piece::Text("a"),
                Piece::Hidden('\u{2066}'),
                Piece::Text("b")
            ]
        );
        // Escaping twice changes nothing more.
        let once = escape("x\u{202E}y").into_owned();
        assert_eq!(escape(&once), once);
    }
}
