//! The last step of every page: each character [`crate::visible::is_hidden`] names is
//! shown as `<U+XXXX>`, wherever in the page it came from (a URL, a summary, a header, a
//! body, an excerpt), so no template can forget it.
//!
//! The page is maud's output, where every value is HTML-escaped (`<`, `>`, `"` and `&` are
//! entities), so a raw `<` opens a tag and the next raw `>` closes it. In text the
//! notation is wrapped in `<span class="ctl">`, styled apart from the text around it. Where
//! markup would not render, it stands as plain text: inside a tag (attribute values), in
//! `title`, `textarea`, `option`, `script` and `style` (raw or escapable raw text), and
//! in `svg` (a `span` is no SVG element).

use crate::visible::{is_hidden, notation};

/// Elements whose content takes the notation as plain text.
const PLAIN: &[&str] = &["title", "textarea", "option", "script", "style", "svg"];

/// `html` with every hidden character shown escaped; unchanged (no copy) when there is
/// none, the common case.
pub(super) fn mark(html: String) -> String {
    let needs = html
        .char_indices()
        .any(|(at, c)| is_hidden(c) && !(c == '\r' && html[at + 1..].starts_with('\n')));
    if !needs {
        return html;
    }
    let mut out = String::with_capacity(html.len() + 64);
    let mut in_tag = false;
    let mut plain_depth = 0usize;
    for (at, c) in html.char_indices() {
        match c {
            '<' => {
                in_tag = true;
                let rest = &html[at + 1..];
                let (closing, rest) = match rest.strip_prefix('/') {
                    Some(rest) => (true, rest),
                    None => (false, rest),
                };
                let name: String = rest
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .map(|c| c.to_ascii_lowercase())
                    .collect();
                if PLAIN.contains(&name.as_str()) {
                    if closing {
                        plain_depth = plain_depth.saturating_sub(1);
                    } else {
                        plain_depth += 1;
                    }
                }
                out.push(c);
            }
            '>' if in_tag => {
                in_tag = false;
                out.push(c);
            }
            '\r' if html[at + 1..].starts_with('\n') => out.push(c),
            c if is_hidden(c) => {
                let shown = notation(c).replace('<', "&lt;").replace('>', "&gt;");
                if in_tag || plain_depth > 0 {
                    out.push_str(&shown);
                } else {
                    out.push_str(&format!(
                        "<span class=\"ctl\" title=\"an invisible or control character, shown escaped\">{shown}</span>"
                    ));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_marked_in_text_and_plain_elsewhere() {
        let page = maud::html! {
            head { title { "run \u{202E}fdp" } }
            p title="x\u{200B}y" { "invoice\u{202E}fdp.exe" }
            svg { text { "a\u{2066}b" } }
            pre { "line\r\nnext\u{1B}[2J" }
        }
        .into_string();
        let marked = mark(page);
        assert!(
            !marked.chars().any(|c| is_hidden(c) && c != '\r'),
            "{marked}"
        );
        assert!(
            marked.contains("<title>run &lt;U+202E&gt;fdp</title>"),
            "{marked}"
        );
        assert!(marked.contains("title=\"x&lt;U+200B&gt;y\""), "{marked}");
        assert!(
            marked.contains("invoice<span class=\"ctl\" title=\"an invisible or control character, shown escaped\">&lt;U+202E&gt;</span>fdp.exe"),
            "{marked}"
        );
        assert!(marked.contains("<text>a&lt;U+2066&gt;b</text>"), "{marked}");
        assert!(
            marked.contains("line\r\nnext<span class=\"ctl\""),
            "{marked}"
        );
        let plain = maud::html! { p { "nothing to mark, שלום" } }.into_string();
        assert_eq!(mark(plain.clone()), plain);
    }
}
