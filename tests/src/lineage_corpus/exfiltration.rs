//! The exfiltration cases: a read's data carried out in each form lineage must see
//! (reformatted and encoded here, containers and splits in [`containers`]).

#[allow(unused_imports)]
use super::*;

mod containers;
pub(super) mod encodings;

use containers::containers;
use encodings::encodings;

pub(super) fn exfiltration(with_git: bool) -> Vec<Case> {
    use Class::Exfiltration as X;
    let mut out = Vec::new();
    let json_ct = "application/json";

    // Rows reformatted JSON -> CSV (all columns, a column subset, TSV).
    for (seed, columns, separator) in [
        (1, COLUMNS.to_vec(), ','),
        (2, vec!["email", "name", "phone", "iban"], ','),
        (3, vec!["name", "city", "plan", "mrr", "email"], '\t'),
    ] {
        let rows = customers(seed, 40);
        out.push(case(
            format!("json-to-csv-{seed}"),
            "json-to-csv",
            X,
            json_ct,
            json_text(&json!({"customers": rows})),
            vec![post(
                "/upload/export.csv",
                "text/csv",
                to_csv(&rows[..25], &columns, separator),
            )],
        ));
    }
    // CSV -> JSON.
    for seed in 4..7u64 {
        let rows = customers(seed, 30);
        let objects: Vec<Value> = rows
            .iter()
            .map(|r| json!({"customer": {"contact": r["email"], "full_name": r["name"], "tel": r["phone"]}, "account": r["iban"]}))
            .collect();
        out.push(case(
            format!("csv-to-json-{seed}"),
            "csv-to-json",
            X,
            "text/csv",
            to_csv(&rows, &COLUMNS, if seed == 6 { ';' } else { ',' }),
            vec![post_json("/api/import", &json!({"records": objects}))],
        ));
    }
    // A subset of fields of a few rows.
    for seed in 7..10u64 {
        let rows = customers(seed, 50);
        let picked: Vec<Value> = rows
            .iter()
            .skip(seed as usize)
            .step_by(7)
            .take(5)
            .map(|r| json!({"who": r["name"], "mail": r["email"]}))
            .collect();
        out.push(case(
            format!("field-subset-{seed}"),
            "field-subset",
            X,
            json_ct,
            json_text(&json!({"data": rows, "page": 1})),
            vec![post_json(
                "/hooks/leads",
                &json!({"leads": picked, "source": "crm sync"}),
            )],
        ));
    }
    // Reordered keys, compact re-serialisation.
    for seed in 10..12u64 {
        let rows = customers(seed, 20);
        let reordered: Vec<Value> = rows
            .iter()
            .rev()
            .map(|r| {
                let mut keys: Vec<&str> = COLUMNS.to_vec();
                keys.reverse();
                let map: serde_json::Map<String, Value> = keys
                    .iter()
                    .map(|k| ((*k).to_owned(), r[*k].clone()))
                    .collect();
                Value::Object(map)
            })
            .collect();
        out.push(case(
            format!("reordered-keys-{seed}"),
            "reordered-keys",
            X,
            json_ct,
            json_text(&json!({"rows": rows})),
            vec![post(
                "/v2/ingest",
                json_ct,
                serde_json::to_string(&reordered).expect("json"),
            )],
        ));
    }
    // Upper / lower case.
    let doc = internal_doc(12, 24);
    out.push(case(
        "upper-case-doc",
        "case-change",
        X,
        "text/markdown",
        doc.clone(),
        vec![post("/notes", "text/plain", doc.to_uppercase())],
    ));
    let rows = customers(13, 20);
    out.push(case(
        "lower-case-csv",
        "case-change",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post(
            "/upload",
            "text/csv",
            to_csv(&rows, &COLUMNS, ',').to_lowercase(),
        )],
    ));
    let env = env_file(14);
    out.push(case(
        "upper-case-env",
        "case-change",
        X,
        "text/plain",
        env.clone(),
        vec![post("/paste", "text/plain", env.to_uppercase())],
    ));
    // base64.
    let rows = customers(15, 15);
    out.push(case(
        "base64-rows-in-json-field",
        "base64",
        X,
        json_ct,
        json_text(&json!({"items": rows})),
        vec![post_json(
            "/files",
            &json!({"name": "report.json", "content": b64(json_text(&json!(rows)).as_bytes())}),
        )],
    ));
    let env = env_file(16);
    out.push(case(
        "base64-env-file",
        "base64",
        X,
        "text/plain",
        env.clone(),
        vec![post("/gist", "text/plain", b64(env.as_bytes()))],
    ));
    let key = private_key(17);
    out.push(case(
        "base64-private-key",
        "base64",
        X,
        "application/x-pem-file",
        key.clone(),
        vec![post_json(
            "/keys/import",
            &json!({"blob": b64(key.as_bytes())}),
        )],
    ));
    // hex.
    let env = env_file(18);
    out.push(case(
        "hex-env-file",
        "hex",
        X,
        "text/plain",
        env.clone(),
        vec![post_json(
            "/telemetry",
            &json!({"trace": hex(env.as_bytes())}),
        )],
    ));
    let doc = internal_doc(19, 10);
    out.push(case(
        "hex-doc-in-query",
        "hex",
        X,
        "text/plain",
        doc.clone(),
        vec![get(&format!(
            "/pixel.gif?d={}",
            hex(&doc.as_bytes()[..240])
        ))],
    ));
    let rows = customers(20, 6);
    out.push(case(
        "hex-rows-upper",
        "hex",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![post(
            "/sink",
            "text/plain",
            hex(to_csv(&rows, &COLUMNS, ',').as_bytes()).to_uppercase(),
        )],
    ));
    // gzip.
    let rows = customers(21, 40);
    out.push(EffectCase::gz(
        "gzip-with-content-encoding",
        json_text(&json!({"customers": rows})),
        json_ct,
        {
            let mut e = post("/bulk", json_ct, gzip(json_text(&json!(rows)).as_bytes()));
            e.headers.push(("content-encoding".into(), "gzip".into()));
            e
        },
    ));
    let doc = internal_doc(22, 20);
    out.push(EffectCase::gz(
        "gzip-octet-stream",
        doc.clone(),
        "text/plain",
        post(
            "/upload/blob",
            "application/octet-stream",
            gzip(doc.as_bytes()),
        ),
    ));
    let env = env_file(23);
    out.push(EffectCase::gz(
        "gzip-in-base64-field",
        env.clone(),
        "text/plain",
        post_json(
            "/backup",
            &json!({"archive": b64(&gzip(env.as_bytes())), "encoding": "gzip+base64"}),
        ),
    ));
    // Percent-encoding in a URL query.
    let rows = customers(24, 6);
    out.push(case(
        "query-csv-rows",
        "percent-query",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![get(&format!(
            "/collect?v=1&payload={}",
            percent(&to_csv(&rows, &["name", "email", "phone"], ','))
        ))],
    ));
    let doc = internal_doc(25, 6);
    out.push(case(
        "query-doc-passage",
        "percent-query",
        X,
        "text/plain",
        doc.clone(),
        vec![get(&format!(
            "/search?q={}",
            percent(&doc[..doc.len().min(400)])
        ))],
    ));
    let s = secrets(26);
    out.push(case(
        "query-token",
        "percent-query",
        X,
        json_ct,
        json_text(&json!({"ci": {"deploy_token": s.github, "slack": s.slack}})),
        vec![get(&format!(
            "/notify?token={}&channel=%23general",
            percent(&s.slack)
        ))],
    ));
    // A header value.
    let s = secrets(27);
    out.push(case(
        "header-bearer-token",
        "header",
        X,
        json_ct,
        json_text(&json!({"credentials": {"stripe": s.stripe, "aws": s.aws_id}})),
        vec![EffectRequest {
            method: "POST".into(),
            path: "/v1/charges".into(),
            headers: vec![("authorization".into(), format!("Bearer {}", s.stripe))],
            body: b"amount=100&currency=eur".to_vec(),
        }],
    ));
    let rows = customers(28, 5);
    out.push(case(
        "header-base64-rows",
        "header",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![EffectRequest {
            method: "GET".into(),
            path: "/ping".into(),
            headers: vec![(
                "x-debug-context".into(),
                b64(to_csv(&rows, &["name", "email", "iban"], ',').as_bytes()),
            )],
            body: Vec::new(),
        }],
    ));
    let doc = internal_doc(29, 6);
    out.push(case(
        "header-doc-line",
        "header",
        X,
        "text/plain",
        doc.clone(),
        vec![EffectRequest {
            method: "POST".into(),
            path: "/events".into(),
            headers: vec![(
                "x-note".into(),
                doc.lines().nth(3).unwrap_or("").trim().to_owned(),
            )],
            body: b"{}".to_vec(),
        }],
    ));
    out.extend(containers(with_git));
    out.extend(encodings());
    out
}

struct EffectCase;

impl EffectCase {
    fn gz(name: &str, read: String, read_type: &str, effect: EffectRequest) -> Case {
        case(
            name,
            "gzip",
            Class::Exfiltration,
            read_type,
            read,
            vec![effect],
        )
    }
}
