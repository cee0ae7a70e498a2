//! Cases printed but not counted: forms lineage does not claim to detect.

#[allow(unused_imports)]
use super::*;

pub(super) fn out_of_scope() -> Vec<Case> {
    use Class::OutOfScope as O;
    let mut out = Vec::new();
    let doc = internal_doc(80, 12);
    out.push(case("paraphrased-summary", "paraphrase", O, "text/markdown", doc, vec![post_json("/chat.postMessage", &json!({"text": "tl;dr: the Norvik deal and the billing migration are both delayed; finance doubts the margin and EMEA loses about a dozen engineers."}))]));
    let env = env_file(81);
    let key = b"k3y";
    let xored: Vec<u8> = env
        .bytes()
        .enumerate()
        .map(|(i, b)| b ^ key[i % 3])
        .collect();
    out.push(case(
        "xor-encrypted-env",
        "encryption",
        O,
        "text/plain",
        env,
        vec![post_json("/blob", &json!({"d": b64(&xored)}))],
    ));
    let s = secrets(82);
    let parts: Vec<String> = s
        .github
        .as_bytes()
        .chunks(8)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    out.push(case(
        "split-token-8-char-parts",
        "split-secret",
        O,
        "text/plain",
        env_file(82),
        parts.iter().map(|p| get(&format!("/c?p={p}"))).collect(),
    ));
    // A key split into four 10-character effects (issue 37): each piece is under the
    // 12-character fragment bar.
    let s = secrets(84);
    let parts: Vec<String> = s
        .github
        .as_bytes()
        .chunks(10)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    out.push(case(
        "split-token-10-char-parts",
        "split-secret",
        O,
        "text/plain",
        env_file(84),
        parts
            .iter()
            .map(|p| post_json("/c", &json!({"p": p})))
            .collect(),
    ));
    // Rows leaked one name per request: each piece is under the 24-byte bar.
    let rows = customers(83, 10);
    out.push(case(
        "one-field-per-effect",
        "small-pieces",
        O,
        "application/json",
        json_text(&json!({"customers": rows})),
        rows.iter()
            .take(4)
            .map(|r| get(&format!("/c?n={}", percent(&cell(&r["name"])))))
            .collect(),
    ));
    out
}
