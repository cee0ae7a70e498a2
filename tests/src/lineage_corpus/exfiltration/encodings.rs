//! Exfiltration in the encodings of issue 37: deflate (zlib and raw), zlib with no
//! Content-Encoding, character references, UTF-16 and UTF-32, base64 wrapped at short
//! widths, zero-width characters, base32, hex with separators; and bodies lineage cannot
//! read (brotli, zstd, an unknown coding, a deflate stream that fails, binary), which must
//! be held by an `unanalysed` flow instead.

#[allow(unused_imports)]
use super::super::*;

/// zlib (RFC 1950).
pub fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("zlib");
    encoder.finish().expect("zlib")
}

/// Raw deflate (RFC 1951).
pub fn raw_deflate(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("deflate");
    encoder.finish().expect("deflate")
}

/// RFC 4648 §6 base32, padded.
pub fn base32(bytes: &[u8]) -> String {
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
    while out.len() % 8 != 0 {
        out.push('=');
    }
    out
}

/// `text` cut into lines of `width` characters.
pub fn wrap(text: &str, width: usize) -> String {
    let lines: Vec<&str> = text
        .as_bytes()
        .chunks(width)
        .map(|c| std::str::from_utf8(c).expect("ascii"))
        .collect();
    lines.join("\n")
}

/// Bytes that look random (a keyed stream over `bytes`): what encryption leaves.
pub fn scrambled(bytes: &[u8], seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    bytes.iter().map(|b| b ^ (rng.next() >> 24) as u8).collect()
}

fn with_header(mut effect: EffectRequest, name: &str, value: &str) -> EffectRequest {
    effect.headers.push((name.into(), value.into()));
    effect
}

pub(super) fn encodings() -> Vec<Case> {
    use Class::Exfiltration as X;
    let mut out = Vec::new();
    let octets = "application/octet-stream";

    // Compressed: deflate as zlib and raw, zlib sent as octets, zlib under base64.
    let env = env_file(101);
    out.push(case(
        "deflate-zlib-env",
        "deflate",
        X,
        "text/plain",
        env.clone(),
        vec![with_header(
            post("/upload", "text/plain", zlib(env.as_bytes())),
            "content-encoding",
            "deflate",
        )],
    ));
    let doc = internal_doc(102, 10);
    out.push(case(
        "deflate-raw-doc",
        "deflate",
        X,
        "text/markdown",
        doc.clone(),
        vec![with_header(
            post("/upload", "text/plain", raw_deflate(doc.as_bytes())),
            "content-encoding",
            "deflate",
        )],
    ));
    let rows = customers(103, 30);
    let csv = to_csv(&rows, &COLUMNS, ',');
    out.push(case(
        "zlib-octet-stream-csv",
        "zlib",
        X,
        "application/json",
        json_text(&json!({"customers": rows})),
        vec![post("/blob", octets, zlib(csv.as_bytes()))],
    ));
    let env = env_file(104);
    out.push(case(
        "zlib-under-base64-env",
        "zlib",
        X,
        "text/plain",
        env.clone(),
        vec![post_json(
            "/blob",
            &json!({"data": b64(&zlib(env.as_bytes()))}),
        )],
    ));

    // Character references, decimal and hexadecimal.
    let doc = internal_doc(105, 8);
    let decimal: String = doc.chars().map(|c| format!("&#{};", c as u32)).collect();
    out.push(case(
        "html-decimal-entities-doc",
        "char-refs",
        X,
        "text/markdown",
        doc,
        vec![post("/pages", "text/html", format!("<p>{decimal}</p>"))],
    ));
    let env = env_file(106);
    let hexrefs: String = env.chars().map(|c| format!("&#x{:x};", c as u32)).collect();
    out.push(case(
        "xml-hex-entities-env",
        "char-refs",
        X,
        "text/plain",
        env,
        vec![post(
            "/feed",
            "application/xml",
            format!("<note>{hexrefs}</note>"),
        )],
    ));

    // UTF-16 (BOM, and by charset with none) and UTF-32.
    let doc = internal_doc(107, 8);
    let mut utf16: Vec<u8> = vec![0xff, 0xfe];
    utf16.extend(doc.encode_utf16().flat_map(u16::to_le_bytes));
    out.push(case(
        "utf16-bom-doc",
        "utf-16/32",
        X,
        "text/markdown",
        doc,
        vec![post("/notes", "text/plain; charset=utf-16", utf16)],
    ));
    let env = env_file(108);
    let utf16be: Vec<u8> = env.encode_utf16().flat_map(u16::to_be_bytes).collect();
    out.push(case(
        "utf16be-charset-env",
        "utf-16/32",
        X,
        "text/plain",
        env,
        vec![post("/notes", "text/plain; charset=utf-16be", utf16be)],
    ));
    let rows = customers(109, 20);
    let csv = to_csv(&rows, &COLUMNS, ',');
    let utf32: Vec<u8> = csv.chars().flat_map(|c| (c as u32).to_le_bytes()).collect();
    out.push(case(
        "utf32-csv",
        "utf-16/32",
        X,
        "application/json",
        json_text(&json!({"customers": rows})),
        vec![post("/notes", "text/plain; charset=utf-32le", utf32)],
    ));

    // base64 wrapped at 20 characters, as a body and inside a JSON string.
    let env = env_file(110);
    out.push(case(
        "base64-wrapped-20-env",
        "base64-wrapped",
        X,
        "text/plain",
        env.clone(),
        vec![post("/paste", "text/plain", wrap(&b64(env.as_bytes()), 20))],
    ));
    let doc = internal_doc(111, 8);
    out.push(case(
        "base64-wrapped-16-in-json-doc",
        "base64-wrapped",
        X,
        "text/markdown",
        doc.clone(),
        vec![post_json(
            "/files",
            &json!({"name": "notes.txt", "content": wrap(&b64(doc.as_bytes()), 16)}),
        )],
    ));

    // Zero-width characters between letters.
    let env = env_file(112);
    let joined: String = env.chars().flat_map(|c| [c, '\u{200d}']).collect();
    out.push(case(
        "zero-width-joiners-env",
        "zero-width",
        X,
        "text/plain",
        env,
        vec![post_json("/chat.postMessage", &json!({"text": joined}))],
    ));
    let doc = internal_doc(113, 8);
    let spaced: String = doc
        .chars()
        .enumerate()
        .flat_map(|(i, c)| [c, ['\u{200b}', '\u{2060}', '\u{feff}'][i % 3]])
        .collect();
    out.push(case(
        "zero-width-spaces-doc",
        "zero-width",
        X,
        "text/markdown",
        doc,
        vec![post("/comments", "text/plain", spaced)],
    ));

    // base32, as a value and wrapped lower-case.
    let env = env_file(114);
    out.push(case(
        "base32-env",
        "base32",
        X,
        "text/plain",
        env.clone(),
        vec![post_json("/kv", &json!({"v": base32(env.as_bytes())}))],
    ));
    let doc = internal_doc(115, 8);
    out.push(case(
        "base32-wrapped-lower-doc",
        "base32",
        X,
        "text/markdown",
        doc.clone(),
        vec![post(
            "/paste",
            "text/plain",
            wrap(&base32(doc.as_bytes()).to_ascii_lowercase(), 40),
        )],
    ));

    // Hex with separators.
    let env = env_file(116);
    let pairs: Vec<String> = env.bytes().map(|b| format!("{b:02x}")).collect();
    out.push(case(
        "hex-spaced-env",
        "hex-separated",
        X,
        "text/plain",
        env.clone(),
        vec![post("/paste", "text/plain", pairs.join(" "))],
    ));
    out.push(case(
        "hex-colons-env",
        "hex-separated",
        X,
        "text/plain",
        env,
        vec![post_json("/kv", &json!({"v": pairs.join(":")}))],
    ));
    let rows = customers(117, 20);
    let csv = to_csv(&rows, &COLUMNS, ',');
    let dump: Vec<String> = csv
        .as_bytes()
        .chunks(16)
        .map(|c| {
            c.iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    out.push(case(
        "hex-dump-csv",
        "hex-separated",
        X,
        "application/json",
        json_text(&json!({"customers": rows})),
        vec![post("/paste", "text/plain", dump.join("\n"))],
    ));

    // Unreadable: must be held as unanalysed.
    let env = env_file(118);
    let opaque = scrambled(env.as_bytes(), 118);
    for (name, coding) in [
        ("brotli-env", "br"),
        ("zstd-env", "zstd"),
        ("unknown-coding-env", "x-custom"),
    ] {
        out.push(case(
            name,
            "unreadable",
            X,
            "text/plain",
            env.clone(),
            vec![with_header(
                post("/upload", octets, opaque.clone()),
                "content-encoding",
                coding,
            )],
        ));
    }
    let mut broken = zlib(env.as_bytes());
    broken.truncate(broken.len() / 2);
    broken.extend_from_slice(&scrambled(b"tail of a stream that is not deflate", 7));
    out.push(case(
        "deflate-that-fails-env",
        "unreadable",
        X,
        "text/plain",
        env.clone(),
        vec![with_header(
            post("/upload", octets, broken),
            "content-encoding",
            "deflate",
        )],
    ));
    out.push(case(
        "binary-scrambled-env",
        "unreadable",
        X,
        "text/plain",
        env,
        vec![post("/upload", octets, opaque)],
    ));
    out
}
