//! Fingerprints are stable under reformatting and find shared passages.

use base64::Engine as _;
use proptest::prelude::*;

use super::*;

fn contacts(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| {
            serde_json::json!({
                "id": i,
                "name": format!("Person{i} Surname{}", i * 7 % 13),
                "email": format!("person{i}.x{}@corp{}.example", i * 31 % 97, i % 5),
            })
        })
        .collect()
}

#[test]
fn reformatted_subset_of_json_rows_overlaps_substantially() {
    let rows = contacts(412);
    let read = serde_json::to_vec(&rows).expect("json");
    let subset: Vec<_> = rows.iter().step_by(2).cloned().collect();
    let effect = serde_json::to_vec_pretty(&serde_json::json!({"export": subset})).expect("json");
    let fingerprints = analyze(&read, None).winnowed();
    let found = overlap(&analyze(&effect, None), &fingerprints).expect("overlap");
    assert!(found.permille > 500, "{found:?}");
}

#[test]
fn unrelated_body_of_similar_size_has_no_overlap() {
    let read = serde_json::to_vec(&contacts(412)).expect("json");
    let unrelated: String = (0..3000)
        .map(|i| format!("word{} lorem{} ", i * 13 % 1009, i % 17))
        .collect();
    let fingerprints = analyze(&read, None).winnowed();
    assert_eq!(
        overlap(&analyze(unrelated.as_bytes(), None), &fingerprints),
        None
    );
}

#[test]
fn base64_and_percent_encoded_copies_are_found() {
    let passage =
        "the quarterly revenue numbers for the northern region are confidential and final";
    let read = format!("report: {passage}. end");
    let fingerprints = analyze(read.as_bytes(), None).winnowed();
    let b64 = base64::engine::general_purpose::STANDARD.encode(passage);
    let effect = format!("{{\"attachment\": \"{b64}\"}}");
    let found =
        overlap(&analyze(effect.as_bytes(), None), &fingerprints).expect("base64 copy found");
    assert!(found.view.contains("base64"), "{found:?}");
    let form = format!("note={}", passage.replace(' ', "+"));
    assert!(overlap(&analyze(form.as_bytes(), None), &fingerprints).is_some());
}

#[test]
fn gzip_bodies_are_decoded() {
    use std::io::Write as _;
    let passage = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu";
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(passage.as_bytes()).expect("gzip");
    let gz = encoder.finish().expect("gzip");
    let fingerprints = analyze(passage.as_bytes(), None).winnowed();
    let found = overlap(&analyze(&gz, Some("gzip")), &fingerprints).expect("found");
    assert!(found.view.starts_with("gzip+"));
    // Not gzip after all: analysed as bytes, not an error.
    let analysis = analyze(&[0x1f, 0x8b, 1, 2, 3], Some("gzip"));
    assert!(analysis.skipped.is_some());
}

#[test]
fn credential_like_values_are_spotted() {
    let found = credential_like("token=ghp_abcdefghijklmnopqrstuvwxyz0123456789 other words");
    assert_eq!(
        found,
        vec!["ghp_abcdefghijklmnopqrstuvwxyz0123456789".to_owned()]
    );
    assert!(credential_like("just some ordinary words here").is_empty());
}

proptest! {
    #[test]
    fn fingerprints_survive_whitespace_changes(words in proptest::collection::vec("[a-z]{1,8}", 8..60), spaces in proptest::collection::vec("[ \t\n]{1,3}", 60)) {
        let plain = words.join(" ");
        let odd: String = words.iter().zip(spaces.iter().cycle()).map(|(w, s)| format!("{w}{s}")).collect();
        prop_assert_eq!(analyze(plain.as_bytes(), None).winnowed(), analyze(odd.as_bytes(), None).winnowed());
    }

    #[test]
    fn fingerprints_survive_json_reserialisation(keys in proptest::collection::btree_map("[a-z]{1,6}", "[a-z ]{0,12}", 1..12)) {
        let compact = serde_json::to_string(&keys).expect("json");
        let pretty = serde_json::to_string_pretty(&keys).expect("json");
        // Same document with keys in reverse order.
        let reversed = format!("{{{}}}", keys.iter().rev().map(|(k, v)| format!("{:?}: {:?}", k, v)).collect::<Vec<_>>().join(", "));
        let a = analyze(compact.as_bytes(), None).winnowed();
        prop_assert_eq!(&a, &analyze(pretty.as_bytes(), None).winnowed());
        prop_assert_eq!(&a, &analyze(reversed.as_bytes(), None).winnowed());
    }
}

#[test]
fn values_moved_under_other_keys_are_recognised() {
    let rows = contacts(40);
    let read = serde_json::to_vec(&rows).expect("json");
    let moved: Vec<_> = rows
        .iter()
        .step_by(2)
        .map(|r| serde_json::json!({"customer": r["name"], "contact": r["email"]}))
        .collect();
    let effect = serde_json::to_vec(&serde_json::json!({"records": moved})).expect("json");
    let found =
        overlap(&analyze(&effect, None), &analyze(&read, None).winnowed()).expect("overlap");
    assert!(found.permille > 400, "{found:?}");
    // Values embedded in prose are found too.
    let prose = format!(
        "Please call {} at {} today.",
        rows[3]["name"].as_str().unwrap_or(""),
        rows[3]["email"].as_str().unwrap_or("")
    );
    assert!(overlap(
        &analyze(prose.as_bytes(), None),
        &analyze(&read, None).winnowed()
    )
    .is_some());
}

#[test]
fn base64_in_form_and_query_values_is_decoded() {
    let passage =
        "the quarterly revenue numbers for the northern region are confidential and final";
    let fingerprints = analyze(passage.as_bytes(), None).winnowed();
    let b64 = base64::engine::general_purpose::STANDARD.encode(passage);
    for effect in [
        format!("data={b64}&x=1"),
        format!(
            "data={}",
            b64.replace('+', "%2B")
                .replace('=', "%3D")
                .replace('/', "%2F")
        ),
    ] {
        let found = overlap(&analyze(effect.as_bytes(), None), &fingerprints);
        assert!(found.is_some(), "{effect}");
    }
}

#[test]
fn readings_of_a_body_reveal_values_under_encodings() {
    use std::io::Write as _;
    let secret = "ph_abcdefghijkmnopqrstuvwx";
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(format!("{{\"ref\": \"{secret}\"}}").as_bytes())
        .expect("gzip");
    let gz = encoder.finish().expect("gzip");
    assert!(super::readings::body(&gz, Some("gzip"))
        .texts
        .iter()
        .any(|t| t.contains(secret)));
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{{\"ref\":\"{secret}\"}}"));
    let body = format!("{{\"blob\":\"{b64}\"}}");
    assert!(super::readings::body(body.as_bytes(), None)
        .texts
        .iter()
        .any(|t| t.contains(secret)));
}

#[test]
fn analysis_is_deterministic_under_load() {
    let body = serde_json::to_vec(&contacts(20_000)).expect("json");
    let a = analyze(&body, None);
    let b = analyze(&body, None);
    assert_eq!(a.winnowed(), b.winnowed());
    assert_eq!(a.skipped, None, "a 2 MB body fits the work budget");
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("zlib");
    encoder.finish().expect("zlib")
}

/// A pack object header: type and size (git's variable-length encoding).
fn object_header(kind: u8, size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut byte = (kind << 4) | (size & 0x0f) as u8;
    let mut rest = size >> 4;
    while rest > 0 {
        out.push(byte | 0x80);
        byte = (rest & 0x7f) as u8;
        rest >>= 7;
    }
    out.push(byte);
    out
}

#[test]
fn hex_multipart_nested_json_and_gzip_under_base64_are_views() {
    let rows = contacts(20);
    let read = serde_json::to_vec(&rows).expect("json");
    let fingerprints = analyze(&read, None).winnowed();
    let text: String = rows
        .iter()
        .take(6)
        .map(|r| format!("{} {}\n", r["name"], r["email"]))
        .collect();
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    let found = overlap(
        &analyze(format!("trace={hex}").as_bytes(), None),
        &fingerprints,
    )
    .expect("hex copy found");
    assert!(found.view.contains("hex"), "{found:?}");
    // A digest decodes to binary and is no view.
    let digest = "3b1f2c9d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c";
    assert!(analyze(digest.as_bytes(), None)
        .views
        .iter()
        .all(|v| !v.name.contains("hex")));

    let part = serde_json::to_vec(&rows[..8]).expect("json");
    let multipart = [
        b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"r.json.gz\"\r\nContent-Type: application/gzip\r\n\r\n".to_vec(),
        gz(&part),
        b"\r\n--XyZ--\r\n".to_vec(),
    ]
    .concat();
    let found = overlap(&analyze(&multipart, None), &fingerprints).expect("multipart part");
    assert!(found.view.starts_with("multipart+gzip+json"), "{found:?}");

    let nested = serde_json::json!({"data": serde_json::to_string(&serde_json::json!({"x": rows[..8]})).expect("json")});
    let analysis = analyze(nested.to_string().as_bytes(), None);
    assert!(overlap(&analysis, &fingerprints).is_some());
    assert!(
        analysis.views.iter().any(|v| v.name == "json-string+json"),
        "a JSON string that is a document is analysed as one"
    );

    use base64::Engine as _;
    let wrapped =
        serde_json::json!({"archive": base64::engine::general_purpose::STANDARD.encode(gz(&part))});
    let found = overlap(
        &analyze(wrapped.to_string().as_bytes(), None),
        &fingerprints,
    )
    .expect("gzip under base64");
    assert!(found.view.contains("base64+gzip+"), "{found:?}");
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

#[test]
fn git_receive_pack_blobs_and_delta_inserts_are_views() {
    let secret_file = "DATABASE_URL=postgres://app:Tr0ub4dor-and-3@db.internal/prod\nSTRIPE_SECRET_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dc\nthe quarterly numbers are confidential until the board meets\n";
    let fingerprints = analyze(secret_file.as_bytes(), None).winnowed();
    let mut pack = b"PACK\0\0\0\x02\0\0\0\x02".to_vec();
    pack.extend(object_header(3, secret_file.len()));
    pack.extend(zlib(secret_file.as_bytes()));
    // A REF_DELTA: base size 10, result size 10 + inserted, copy 10 bytes, insert text.
    let inserted = b"appended: the quarterly numbers are confidential until the board meets";
    let mut delta = vec![
        10,
        (10 + inserted.len()) as u8,
        0x90,
        10,
        inserted.len() as u8,
    ];
    delta.extend_from_slice(inserted);
    pack.extend(object_header(7, delta.len()));
    pack.extend([7u8; 20]);
    pack.extend(zlib(&delta));
    pack.extend([0u8; 20]);
    let command = format!(
        "{} {} refs/heads/main\0 report-status\n",
        "0".repeat(40),
        "a".repeat(40)
    );
    let mut body = format!("{:04x}{command}", command.len() + 4).into_bytes();
    body.extend_from_slice(b"0000");
    body.extend_from_slice(&pack);
    let analysis = analyze(&body, None);
    let names: Vec<&str> = analysis.views.iter().map(|v| v.name.as_str()).collect();
    assert!(names.contains(&"git-blob+text"), "{names:?}");
    assert!(names.contains(&"git-delta+text"), "{names:?}");
    let found = overlap(&analysis, &fingerprints).expect("blob found");
    assert!(found.view.starts_with("git-blob+"), "{found:?}");
    assert!(
        analysis
            .views
            .iter()
            .any(|v| credential_like(&v.text)
                .contains(&"sk_live_4eC39HqLyjWDarjtT1zdp7dc".to_owned()))
    );
    // A truncated pack keeps what was read before the cut.
    let cut = &body[..body.len() - 40];
    assert!(analyze(cut, None)
        .views
        .iter()
        .any(|v| v.name == "git-blob+text"));
}

#[test]
fn secret_named_values_and_url_passwords_are_credentials_but_ids_are_not() {
    let env = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nDATABASE_URL=postgres://billing:Xk29-pLq7!mZ@db/prod\n\"client_secret\": \"9f8Qz_Lw-02Ab\"\nNODE_ENV=production\nDB_PASSWORD=${DB_PASSWORD}\n";
    let found = credential_like(env);
    assert!(
        found.contains(&"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned()),
        "{found:?}"
    );
    assert!(found.contains(&"Xk29-pLq7!mZ".to_owned()), "{found:?}");
    assert!(found.contains(&"9f8Qz_Lw-02Ab".to_owned()), "{found:?}");
    assert!(
        !found
            .iter()
            .any(|f| f.contains("production") || f.contains("${")),
        "{found:?}"
    );
    assert!(credential_like(
        "ref 7c9e6679-7425-40de-944b-e07fc1f90ae7 at 9fceb02d0ae598e95dc970b74767f19372d61af8"
    )
    .is_empty());
    assert!(credential_like("\"idempotency_key\": \"req-2026-01-05-00042\"").is_empty());
}

#[test]
fn lone_identifiers_links_and_boilerplate_make_no_passage() {
    let read = r#"{"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "created_at": "2026-01-04T09:14:27.512Z", "html_url": "https://github.example/acme/billing-api/issues/4182", "license": "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated documentation files"}"#;
    let fingerprints = analyze(read.as_bytes(), None).winnowed();
    for effect in [
        r#"{"ref": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "text": "on it"}"#,
        r#"{"since": "2026-01-04T09:14:27.512Z"}"#,
        "see https://github.example/acme/billing-api/issues/4182 please",
        "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated documentation files",
    ] {
        assert_eq!(overlap(&analyze(effect.as_bytes(), None), &fingerprints), None, "{effect}");
    }
}

#[test]
fn tables_sharing_only_their_columns_share_nothing() {
    let read = "id,name,email,phone,city,plan\n1,Ada Lovelace,ada@analytical.example,+44 20 7946 0001,London,growth\n2,Alan Turing,alan@bletchley.example,+44 20 7946 0002,Wilmslow,starter\n";
    let other = "id,name,email,phone,city,plan\n7,Grace Hopper,grace@navy.example,+1 202 555 0107,Arlington,enterprise\n";
    let fingerprints = analyze(read.as_bytes(), None).winnowed();
    assert_eq!(
        overlap(&analyze(other.as_bytes(), None), &fingerprints),
        None
    );
    // The rows themselves are still found, as cells moved into JSON.
    let moved = r#"{"people": [{"contact": "ada@analytical.example", "who": "Ada Lovelace"}, {"contact": "alan@bletchley.example", "who": "Alan Turing"}]}"#;
    let found = overlap(&analyze(moved.as_bytes(), None), &fingerprints).expect("cells found");
    assert!(found.bytes >= 24, "{found:?}");
}

#[test]
fn public_digests_and_ssh_public_keys_are_not_credentials() {
    let lockfile = r#""integrity": "sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+LFTGHVxVjcXGBa3Phh0OAOfBmHNMzWQXjh63xkw==""#;
    assert!(crate::fingerprint::credential_like(lockfile).is_empty());
    let known_hosts = "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    assert!(crate::fingerprint::credential_like(known_hosts).is_empty());
    let secret = "token: Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A";
    assert_eq!(crate::fingerprint::credential_like(secret).len(), 1);
}

#[test]
fn no_piece_of_a_public_digest_is_a_credential() {
    // The base64 of a digest splits at '+' and '/'; the piece after one has six digits.
    let tag = r#"<script src="x.js" integrity="sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC9a1b2c3d4e5f6"></script>"#;
    assert!(
        crate::fingerprint::credential_like(tag).is_empty(),
        "{:?}",
        crate::fingerprint::credential_like(tag)
    );
}

#[test]
fn public_material_is_blanked_in_text_with_multibyte_characters() {
    let text = "résumé — integrity sha512-Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdo+aWprbG1ub3A1234567 ✓ and AKIAIOSFODNN7EXAMPLEKEY1";
    assert_eq!(
        crate::fingerprint::credential_like(text),
        ["AKIAIOSFODNN7EXAMPLEKEY1"]
    );
}

/// A read of a secret passage, and whether `effect` (with `encoding`) is found to carry it.
fn carries(effect: &[u8], encoding: Option<&str>) -> Option<Overlap> {
    let read = format!("note: {PASSAGE}.");
    overlap(
        &analyze_request(effect, encoding, &[]),
        &analyze(read.as_bytes(), None).winnowed(),
    )
}

const PASSAGE: &str =
    "customer Alice Example owes 1200 euros under contract 4471 signed in Lisbon last May";

#[test]
fn every_new_encoding_of_a_passage_is_a_view() {
    use std::io::Write as _;
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    zlib.write_all(PASSAGE.as_bytes()).expect("zlib");
    let zlib = zlib.finish().expect("zlib");
    let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    raw.write_all(PASSAGE.as_bytes()).expect("deflate");
    let raw = raw.finish().expect("deflate");
    let b64 = base64::engine::general_purpose::STANDARD.encode(PASSAGE);
    let wrapped: Vec<String> = b64
        .as_bytes()
        .chunks(20)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(PASSAGE.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let spaced: Vec<String> = PASSAGE.bytes().map(|b| format!("{b:02x}")).collect();
    let entities: String = PASSAGE
        .chars()
        .map(|c| format!("&#{};", c as u32))
        .collect();
    let joined: String = PASSAGE.chars().flat_map(|c| [c, '\u{200d}']).collect();
    let cases: Vec<(&str, Vec<u8>, Option<&str>, &str)> = vec![
        ("deflate (zlib)", zlib.clone(), Some("deflate"), "deflate+"),
        ("deflate (raw)", raw, Some("deflate"), "deflate+"),
        ("zlib as octet-stream", zlib.clone(), None, "zlib+"),
        (
            "zlib under base64",
            base64::engine::general_purpose::STANDARD
                .encode(&zlib)
                .into_bytes(),
            None,
            "zlib+",
        ),
        (
            "base64 wrapped at 20",
            wrapped.join("\n").into_bytes(),
            None,
            "base64+",
        ),
        (
            "wrapped base64 in JSON",
            serde_json::to_vec(&serde_json::json!({"file": wrapped.join("\n")})).expect("json"),
            None,
            "base64+",
        ),
        ("utf-16", utf16, None, "utf-16le+"),
        ("spaced hex", spaced.join(" ").into_bytes(), None, "hex+"),
        ("colon hex", spaced.join(":").into_bytes(), None, "hex+"),
        (
            "numeric entities",
            entities.into_bytes(),
            None,
            "char-refs+",
        ),
        (
            "zero-width joiners",
            joined.into_bytes(),
            None,
            "zero-width-removed+",
        ),
    ];
    for (what, body, encoding, view) in cases {
        let found = carries(&body, encoding).unwrap_or_else(|| panic!("{what}: not found"));
        assert!(found.view.contains(view), "{what}: {found:?}");
        assert!(found.bytes >= 24, "{what}: {found:?}");
    }
}

#[test]
fn bodies_that_cannot_be_read_are_marked_unanalysed() {
    let text = PASSAGE.as_bytes();
    let broken = analyze_request(b"\x78\x9c\x01\x02garbage", Some("deflate"), &[]);
    assert!(
        broken
            .skipped
            .as_deref()
            .is_some_and(|s| s.contains("did not decode")),
        "{:?}",
        broken.skipped
    );
    for coding in ["br", "zstd", "x-snappy"] {
        let skipped = analyze_request(text, Some(coding), &[]).skipped;
        assert!(
            skipped.as_deref().is_some_and(|s| s.contains(coding)),
            "{skipped:?}"
        );
    }
    let binary: Vec<u8> = (0..2048u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let skipped = analyze_request(&binary, None, &[]).skipped;
    assert_eq!(skipped.as_deref(), Some(super::encoding::BINARY));
    // Text, Latin-1, JSON and an empty body are analysed as before.
    for body in [text, b"caf\xe9 cr\xe8me br\xfbl\xe9e", b"{\"a\":1}", b""] {
        assert_eq!(analyze_request(body, None, &[]).skipped, None);
    }
    assert_eq!(analyze_request(text, Some("identity"), &[]).skipped, None);
}

#[test]
fn benign_text_gains_no_passage_from_the_new_views() {
    let read = format!("note: {PASSAGE}.");
    let fingerprints = analyze(read.as_bytes(), None).winnowed();
    for effect in [
        "Fish &amp; chips &#8212; the usual, at 12:30 near the station on Friday",
        "00:1a:2b:3c:4d:5e 00:1a:2b:3c:4d:5f build 0xdeadbeef finished",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567 is the base32 alphabet",
        "deploy\nrelease\nupdate\nfinish",
    ] {
        assert_eq!(
            overlap(&analyze(effect.as_bytes(), None), &fingerprints),
            None
        );
    }
}
