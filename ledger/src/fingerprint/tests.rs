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
fn decoded_texts_reveal_values_under_encodings() {
    use std::io::Write as _;
    let secret = "ph_abcdefghijkmnopqrstuvwx";
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(format!("{{\"ref\": \"{secret}\"}}").as_bytes())
        .expect("gzip");
    let gz = encoder.finish().expect("gzip");
    assert!(decoded_texts(&gz, Some("gzip"))
        .iter()
        .any(|t| t.contains(secret)));
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{{\"ref\":\"{secret}\"}}"));
    let body = format!("{{\"blob\":\"{b64}\"}}");
    assert!(decoded_texts(body.as_bytes(), None)
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
