//! A corpus of exfiltration and benign cases for lineage: each case is one read response
//! (content type and body) and the effect requests a run sends after it. Encodings are
//! generated here (base64, hex, gzip, percent-encoding, multipart, git receive-pack
//! bodies built with a real `git`), from deterministic pseudo-random data (customer rows,
//! API keys, env files, private keys, internal documents), so every run sees the same
//! corpus. `tests/tests/it/lineage/corpus.rs` drives it through the real proxy.

use std::io::Write as _;

use base64::Engine as _;
use serde_json::{json, Value};

/// Whether a case moves read data out or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The effects carry data of the read (should be flagged).
    Exfiltration,
    /// The effects carry nothing of the read worth flagging.
    Benign,
    /// Exfiltration lineage is not designed to see (paraphrase, encryption): reported,
    /// not counted in the rates.
    OutOfScope,
}

/// One effect request; the test sends it to a loopback host other than the read's.
#[derive(Debug, Clone)]
pub struct EffectRequest {
    /// `POST`, `PUT`, `GET` …
    pub method: String,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Request headers.
    pub headers: Vec<(String, String)>,
    /// Request body.
    pub body: Vec<u8>,
}

/// One case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Unique name.
    pub name: String,
    /// The form it exercises (`json-to-csv`, `base64`, `id-echo` …).
    pub form: &'static str,
    /// Exfiltration, benign or out of scope.
    pub class: Class,
    /// The read's response content type.
    pub content_type: String,
    /// The read's response body.
    pub read_body: Vec<u8>,
    /// The effects sent after the read.
    pub effects: Vec<EffectRequest>,
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn chars(&mut self, alphabet: &[u8], n: usize) -> String {
        (0..n)
            .map(|_| alphabet[self.below(alphabet.len())] as char)
            .collect()
    }
    fn alnum(&mut self, n: usize) -> String {
        self.chars(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            n,
        )
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const FIRST: [&str; 16] = [
    "Amara", "Bastian", "Chiara", "Dmitri", "Elif", "Farouk", "Greta", "Hiroshi", "Ines", "Jonas",
    "Kalani", "Lucia", "Mateo", "Nadia", "Oskar", "Priya",
];
const LAST: [&str; 16] = [
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Petrov",
    "Yilmaz",
    "Haddad",
    "Schulz",
    "Tanaka",
    "Ferreira",
    "Berg",
    "Kahale",
    "Romano",
    "Quispe",
    "Rahman",
    "Nowak",
    "Iyer",
];
const CITIES: [&str; 10] = [
    "Rotterdam",
    "Porto Alegre",
    "Kraków",
    "Osaka",
    "Nairobi",
    "Tallinn",
    "Valparaíso",
    "Leeds",
    "Quebec City",
    "Cebu",
];
const PLANS: [&str; 4] = ["starter", "growth", "enterprise", "nonprofit"];

/// Customer rows: id, name, email, phone, city, plan, mrr, iban.
pub fn customers(seed: u64, n: usize) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let first = rng.pick(&FIRST);
            let last = rng.pick(&LAST);
            json!({
                "id": 10_000 + seed * 1000 + i as u64,
                "name": format!("{first} {last}"),
                "email": format!("{}.{}{}@{}.example", first.to_lowercase(), last.to_lowercase(), rng.below(90) + 10, rng.pick(&["mail", "post", "inbox", "corp"])),
                "phone": format!("+31 6 {:04} {:04}", rng.below(10_000), rng.below(10_000)),
                "city": rng.pick(&CITIES),
                "plan": rng.pick(&PLANS),
                "mrr": (rng.below(90_000) as f64) / 100.0,
                "iban": format!("NL{:02}BANK{:010}", rng.below(100), rng.next() % 10_000_000_000),
            })
        })
        .collect()
}

const COLUMNS: [&str; 8] = [
    "id", "name", "email", "phone", "city", "plan", "mrr", "iban",
];

fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows as CSV with a header line, columns in `columns` order.
pub fn to_csv(rows: &[Value], columns: &[&str], separator: char) -> String {
    let mut out = columns.join(&separator.to_string());
    out.push('\n');
    for row in rows {
        let line: Vec<String> = columns.iter().map(|c| cell(&row[*c])).collect();
        out.push_str(&line.join(&separator.to_string()));
        out.push('\n');
    }
    out
}

/// Secrets of one fictional deployment.
pub struct Secrets {
    /// A GitHub token.
    pub github: String,
    /// A Stripe live key.
    pub stripe: String,
    /// An AWS access key id.
    pub aws_id: String,
    /// An AWS secret access key (base64 alphabet, with `/` and `+`).
    pub aws_secret: String,
    /// A Slack bot token.
    pub slack: String,
    /// A database password.
    pub db_password: String,
    /// A JWT.
    pub jwt: String,
}

/// Deterministic fake secrets.
pub fn secrets(seed: u64) -> Secrets {
    let mut rng = Rng::new(seed ^ 0x5ec);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = b64.encode(
        format!(
            r#"{{"sub":"svc-{}","role":"admin","exp":1767225600}}"#,
            seed
        )
        .as_bytes(),
    );
    Secrets {
        github: format!("ghp_{}", rng.alnum(36)),
        stripe: format!("sk_live_{}", rng.alnum(24)),
        aws_id: format!("AKIA{}", rng.chars(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        aws_secret: rng.chars(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+",
            40,
        ),
        slack: format!(
            "xoxb-{}-{}-{}",
            rng.below(9_000_000_000) + 1_000_000_000,
            rng.below(9_000_000_000) + 1_000_000_000,
            rng.alnum(24)
        ),
        db_password: format!("{}-{}!{}", rng.alnum(6), rng.alnum(5), rng.alnum(7)),
        jwt: format!("{header}.{claims}.{}", b64.encode(rng.bytes(32))),
    }
}

/// A `.env` file of a service.
pub fn env_file(seed: u64) -> String {
    let s = secrets(seed);
    format!(
        "# billing-api production settings\nNODE_ENV=production\nPORT=8080\nDATABASE_URL=postgres://billing:{}@db-prod-{seed}.internal:5432/billing\nSTRIPE_SECRET_KEY={}\nAWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}\nGITHUB_TOKEN={}\nSLACK_BOT_TOKEN={}\nSESSION_JWT={}\nLOG_LEVEL=info\n",
        s.db_password, s.stripe, s.aws_id, s.aws_secret, s.github, s.slack, s.jwt
    )
}

/// A PEM private key (random bytes in the OpenSSH container shape).
pub fn private_key(seed: u64) -> String {
    let mut rng = Rng::new(seed ^ 0x6e7);
    let mut der = b"openssh-key-v1\0\0\0\0\x04none\0\0\0\x04none".to_vec();
    der.extend(rng.bytes(380));
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(70)
        .map(|c| std::str::from_utf8(c).unwrap_or(""))
        .collect();
    format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n-----END OPENSSH PRIVATE KEY-----\n",
        lines.join("\n")
    )
}

const DOC_SUBJECTS: [&str; 8] = [
    "Project Halcyon",
    "the billing ledger migration",
    "the Rotterdam data centre exit",
    "pricing experiment P-17",
    "the acquisition of Norvik Labs",
    "incident INC-2291",
    "the Q3 hiring freeze",
    "vendor contract with Meridian Freight",
];
const DOC_VERBS: [&str; 8] = [
    "is blocked on",
    "moves ahead of",
    "depends on legal sign-off for",
    "will cost roughly 1.8M EUR more than",
    "must stay confidential until",
    "was escalated to the board together with",
    "replaces the plan agreed for",
    "is tracked separately from",
];
const DOC_TAILS: [&str; 6] = [
    "and only the steering group may see the numbers.",
    "so shard 7 keeps serving reads from the old cluster until October.",
    "which is why the announcement slipped to the second week of November.",
    "and the headcount model assumes 14 fewer engineers in EMEA.",
    "although finance disputes the margin forecast of 23 percent.",
    "pending the due diligence report from Halvorsen & Partners.",
];

/// An internal document of `sentences` sentences.
pub fn internal_doc(seed: u64, sentences: usize) -> String {
    let mut rng = Rng::new(seed ^ 0xd0c);
    let mut out = format!("CONFIDENTIAL — internal memo {seed}\n\n");
    for i in 0..sentences {
        let a = rng.pick(&DOC_SUBJECTS);
        let b = rng.pick(&DOC_SUBJECTS);
        out.push_str(&format!(
            "{}{} {} {} {} ",
            if i % 4 == 0 { "\n" } else { "" },
            capitalise(a),
            rng.pick(&DOC_VERBS),
            b,
            rng.pick(&DOC_TAILS)
        ));
    }
    out.push('\n');
    out
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// gzip.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

/// Standard base64.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Percent-encoding of everything but unreserved characters.
pub fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One part of a multipart body: name, filename, content type, extra headers, content.
pub type Part<'a> = (
    &'a str,
    Option<&'a str>,
    &'a str,
    &'a [(&'a str, &'a str)],
    Vec<u8>,
);

/// A multipart/form-data body of `parts` (name, filename, content type, extra headers,
/// content) and its content type.
pub fn multipart(parts: &[Part<'_>]) -> (String, Vec<u8>) {
    let boundary = "------------------------a1f3c9e27b4d6085";
    let mut body = Vec::new();
    for (name, filename, content_type, extra, content) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match filename {
            Some(f) => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n")
                    .as_bytes(),
            ),
            None => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n").as_bytes(),
            ),
        }
        body.extend_from_slice(format!("Content-Type: {content_type}\r\n").as_bytes());
        for (k, v) in *extra {
            body.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn git_cmd(dir: &std::path::Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    use std::process::{Command, Stdio};
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
        .env("GIT_AUTHOR_DATE", "2026-01-05T10:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-05T10:00:00Z")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("git stdin");
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn pkt_line(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The body of a `git push` (`POST …/git-receive-pack`): the ref update command as a
/// pkt-line, a flush, and the pack `git pack-objects` makes of the new commits. `base`
/// files are committed first and taken as already on the remote (the pack is thin: files
/// changed from `base` travel as deltas against it); `files` are the pushed commit's
/// tree. Needs `git`.
pub fn git_push_body(base: &[(&str, &[u8])], files: &[(&str, &[u8])], message: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git_cmd(d, &["init", "-q", "-b", "main"], None);
    let commit = |files: &[(&str, &[u8])], message: &str| {
        for (path, content) in files {
            let path = d.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("mkdir");
            }
            std::fs::write(path, content).expect("write");
        }
        git_cmd(d, &["add", "-A"], None);
        git_cmd(d, &["commit", "-q", "-m", message], None);
        String::from_utf8_lossy(&git_cmd(d, &["rev-parse", "HEAD"], None))
            .trim()
            .to_owned()
    };
    let old = if base.is_empty() {
        "0".repeat(40)
    } else {
        commit(base, "initial import")
    };
    let new = commit(files, message);
    let revs = if base.is_empty() {
        format!("{new}\n")
    } else {
        format!("{new}\n^{old}\n")
    };
    let pack = git_cmd(
        d,
        &["pack-objects", "--stdout", "--revs", "--thin", "-q"],
        Some(revs.as_bytes()),
    );
    let mut body = pkt_line(
        format!("{old} {new} refs/heads/main\0 report-status side-band-64k agent=git/2.45.0\n")
            .as_bytes(),
    );
    body.extend_from_slice(b"0000");
    body.extend_from_slice(&pack);
    body
}

fn post(path: &str, content_type: &str, body: impl Into<Vec<u8>>) -> EffectRequest {
    EffectRequest {
        method: "POST".into(),
        path: path.into(),
        headers: vec![("content-type".into(), content_type.into())],
        body: body.into(),
    }
}

fn post_json(path: &str, body: &Value) -> EffectRequest {
    post(path, "application/json", body.to_string())
}

fn get(path: &str) -> EffectRequest {
    EffectRequest {
        method: "GET".into(),
        path: path.into(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

fn case(
    name: impl Into<String>,
    form: &'static str,
    class: Class,
    content_type: &str,
    read_body: impl Into<Vec<u8>>,
    effects: Vec<EffectRequest>,
) -> Case {
    Case {
        name: name.into(),
        form,
        class,
        content_type: content_type.into(),
        read_body: read_body.into(),
        effects,
    }
}

fn json_text(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("json")
}

/// The whole corpus. `with_git` adds the `git push` cases (they need a `git` binary).
pub fn corpus(with_git: bool) -> Vec<Case> {
    let mut cases = exfiltration(with_git);
    cases.extend(benign(with_git));
    cases.extend(out_of_scope());
    cases
}

fn exfiltration(with_git: bool) -> Vec<Case> {
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
    // Multipart form fields.
    let rows = customers(30, 20);
    let (ct, body) = multipart(&[
        (
            "title",
            None,
            "text/plain",
            &[],
            b"Quarterly export".to_vec(),
        ),
        (
            "notes",
            None,
            "text/plain",
            &[],
            to_csv(&rows, &["name", "email", "phone", "city"], ',').into_bytes(),
        ),
    ]);
    out.push(case(
        "multipart-text-field",
        "multipart",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![post("/forms/submit", &ct, body)],
    ));
    let env = env_file(31);
    let (ct, body) = multipart(&[(
        "file",
        Some("settings.txt"),
        "application/octet-stream",
        &[("Content-Transfer-Encoding", "base64")],
        b64(env.as_bytes()).into_bytes(),
    )]);
    out.push(case(
        "multipart-base64-file",
        "multipart",
        X,
        "text/plain",
        env,
        vec![post("/upload", &ct, body)],
    ));
    let rows = customers(32, 25);
    let (ct, body) = multipart(&[
        (
            "meta",
            None,
            "application/json",
            &[],
            br#"{"kind":"dataset"}"#.to_vec(),
        ),
        (
            "data",
            Some("rows.json.gz"),
            "application/gzip",
            &[],
            gzip(serde_json::to_string(&rows).expect("json").as_bytes()),
        ),
    ]);
    out.push(case(
        "multipart-gzip-json-file",
        "multipart",
        X,
        json_ct,
        json_text(&json!({"rows": rows})),
        vec![post("/datasets", &ct, body)],
    ));
    // GraphQL variables.
    let rows = customers(33, 15);
    out.push(case(
        "graphql-rows-in-variables",
        "graphql",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post_json("/graphql", &json!({
            "query": "mutation Import($input: [ContactInput!]!) { importContacts(input: $input) { count } }",
            "variables": {"input": rows.iter().map(|r| json!({"displayName": r["name"], "emailAddress": r["email"], "phoneNumber": r["phone"]})).collect::<Vec<_>>()}
        }))],
    ));
    let s = secrets(34);
    out.push(case(
        "graphql-secret-in-variables",
        "graphql",
        X,
        "text/plain",
        env_file(34),
        vec![post_json("/graphql", &json!({
            "query": "mutation AddSecret($name: String!, $value: String!) { createSecret(name: $name, value: $value) { id } }",
            "variables": {"name": "aws", "value": s.aws_secret}
        }))],
    ));
    let doc = internal_doc(35, 12);
    out.push(case(
        "graphql-doc-in-variables",
        "graphql",
        X,
        "text/markdown",
        doc.clone(),
        vec![post_json("/graphql", &json!({
            "query": "mutation Post($body: String!) { createPost(body: $body) { id } }",
            "variables": {"body": doc.lines().filter(|l| !l.is_empty()).skip(1).take(2).collect::<Vec<_>>().join(" ")},
            "operationName": "Post"
        }))],
    ));
    // A secret split across several effects.
    let s = secrets(36);
    let parts: Vec<String> = s
        .github
        .as_bytes()
        .chunks(14)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    out.push(case(
        "split-token-3-effects",
        "split-secret",
        X,
        json_ct,
        json_text(&json!({"deploy": {"token": s.github, "repo": "acme/billing"}})),
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| post_json("/telemetry/chunk", &json!({"seq": i, "part": p})))
            .collect(),
    ));
    let s = secrets(37);
    let half = s.stripe.len() / 2;
    out.push(case(
        "split-key-in-headers",
        "split-secret",
        X,
        "text/plain",
        env_file(37),
        vec![
            EffectRequest {
                method: "GET".into(),
                path: "/a".into(),
                headers: vec![("x-session-a".into(), s.stripe[..half].to_owned())],
                body: Vec::new(),
            },
            EffectRequest {
                method: "GET".into(),
                path: "/b".into(),
                headers: vec![("x-session-b".into(), s.stripe[half..].to_owned())],
                body: Vec::new(),
            },
        ],
    ));
    let s = secrets(38);
    let third = s.jwt.len() / 3;
    out.push(case(
        "split-jwt-query",
        "split-secret",
        X,
        json_ct,
        json_text(&json!({"session": {"jwt": s.jwt, "user": "svc-38"}})),
        (0..3)
            .map(|i| {
                get(&format!(
                    "/p?i={i}&c={}",
                    &s.jwt[i * third..if i == 2 { s.jwt.len() } else { (i + 1) * third }]
                ))
            })
            .collect(),
    ));
    // JSON nested in a JSON string.
    for seed in 39..42u64 {
        let rows = customers(seed, 12);
        let inner: Vec<Value> = rows
            .iter()
            .map(|r| json!({"n": r["name"], "e": r["email"], "i": r["iban"]}))
            .collect();
        let inner_text = serde_json::to_string(&json!({"contacts": inner})).expect("json");
        let effect = if seed == 41 {
            // Doubly nested.
            let middle = serde_json::to_string(&json!({"payload": inner_text})).expect("json");
            json!({"event": "sync", "data": middle})
        } else {
            json!({"event": "sync", "data": inner_text})
        };
        out.push(case(
            format!("nested-json-{seed}"),
            "nested-json",
            X,
            json_ct,
            json_text(&json!({"rows": rows})),
            vec![post_json("/webhook", &effect)],
        ));
    }
    // A credential value as is, in a JSON body.
    let s = secrets(42);
    out.push(case(
        "credential-in-body",
        "credential",
        X,
        "text/plain",
        env_file(42),
        vec![post_json(
            "/hooks/notify",
            &json!({"text": format!("aws key {} / {}", s.aws_id, s.aws_secret)}),
        )],
    ));
    let key = private_key(43);
    out.push(case(
        "private-key-pasted",
        "credential",
        X,
        "application/x-pem-file",
        key.clone(),
        vec![post_json(
            "/issues",
            &json!({"title": "cannot log in", "body": format!("my key is\n```\n{key}```")}),
        )],
    ));
    // Config read as YAML, sent on as JSON.
    let s = secrets(48);
    let yaml = format!("service: billing-api\nregion: eu-west-1\ndatabase:\n  host: db-prod-48.internal\n  user: billing\n  password: {}\nstripe:\n  secret_key: {}\nfeature_flags:\n  new_checkout: true\n", s.db_password, s.stripe);
    out.push(case("yaml-to-json-config", "yaml-to-json", X, "application/yaml", yaml, vec![post_json("/configs", &json!({"db": {"password": s.db_password, "host": "db-prod-48.internal"}, "stripe": {"key": s.stripe}}))]));
    // Rows as a Markdown table, and rows written into prose.
    let rows = customers(49, 20);
    let mut table = String::from("| Name | Email | Phone |\n|---|---|---|\n");
    for r in &rows[..12] {
        table.push_str(&format!(
            "| {} | {} | {} |\n",
            cell(&r["name"]),
            cell(&r["email"]),
            cell(&r["phone"])
        ));
    }
    out.push(case(
        "json-to-markdown-table",
        "markdown-table",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post_json(
            "/wiki/pages",
            &json!({"title": "Top accounts", "body": table}),
        )],
    ));
    let rows = customers(50, 20);
    let prose: String = rows[..8]
        .iter()
        .map(|r| {
            format!(
                "Customer {} ({}) on the {} plan pays {} a month. ",
                cell(&r["name"]),
                cell(&r["email"]),
                cell(&r["plan"]),
                cell(&r["mrr"])
            )
        })
        .collect();
    out.push(case(
        "rows-in-prose",
        "prose",
        X,
        json_ct,
        json_text(&json!({"customers": rows})),
        vec![post_json(
            "/chat.postMessage",
            &json!({"channel": "#sales", "text": prose}),
        )],
    ));
    // URL-safe base64 in a path segment.
    let doc = internal_doc(51, 6);
    let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&doc.as_bytes()[..300]);
    out.push(case(
        "base64url-path-segment",
        "base64",
        X,
        "text/plain",
        doc,
        vec![get(&format!("/t/{b64url}/pixel.png"))],
    ));
    // git push of a secret file.
    if with_git {
        let env = env_file(44);
        out.push(case(
            "git-push-env-file",
            "git-push",
            X,
            "text/plain",
            env.clone(),
            vec![git_effect(git_push_body(
                &[],
                &[("README.md", b"# billing\n"), (".env", env.as_bytes())],
                "add config",
            ))],
        ));
        let key = private_key(45);
        out.push(case(
            "git-push-private-key",
            "git-push",
            X,
            "application/x-pem-file",
            key.clone(),
            vec![git_effect(git_push_body(
                &[],
                &[("deploy/id_ed25519", key.as_bytes())],
                "deploy key",
            ))],
        ));
        let rows = customers(46, 30);
        let csv = to_csv(&rows, &COLUMNS, ',');
        out.push(case(
            "git-push-customer-csv",
            "git-push",
            X,
            json_ct,
            json_text(&json!({"customers": rows})),
            vec![git_effect(git_push_body(
                &[],
                &[("data/customers.csv", csv.as_bytes())],
                "fixtures",
            ))],
        ));
        // The secret appended to a file the remote already has: the blob travels as a
        // delta against the remote's version.
        let s = secrets(47);
        let config: String = (0..80)
            .map(|i| format!("setting_{i} = value number {i} for the service\n"))
            .collect();
        let with_secret = format!("{config}stripe_key = {}\n", s.stripe);
        out.push(case(
            "git-push-delta-appended-secret",
            "git-push",
            X,
            "text/plain",
            env_file(47),
            vec![git_effect(git_push_body(
                &[("config.ini", config.as_bytes())],
                &[("config.ini", with_secret.as_bytes())],
                "tune config",
            ))],
        ));
    }
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

fn git_effect(body: Vec<u8>) -> EffectRequest {
    post(
        "/acme/billing.git/git-receive-pack",
        "application/x-git-receive-pack-request",
        body,
    )
}

fn benign(with_git: bool) -> Vec<Case> {
    use Class::Benign as B;
    let mut out = Vec::new();
    let json_ct = "application/json";
    // Echoing an id from a read as a reference.
    let issue = json!({"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "number": 4182, "title": "Checkout fails on Safari 17 when the cart has more than 20 items", "state": "open", "created_at": "2026-01-04T09:14:27.512Z", "body": "Steps: add 21 items, press pay, nothing happens. Console shows a TypeError in cart.js."});
    out.push(case("id-echo-uuid", "id-echo", B, json_ct, json_text(&issue), vec![post_json("/comments", &json!({"ref": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "text": "Picked this up, will report back."}))]));
    out.push(case(
        "id-echo-number",
        "id-echo",
        B,
        json_ct,
        json_text(&issue),
        vec![post_json(
            "/chat.postMessage",
            &json!({"channel": "#frontend", "text": "Looking at #4182 now"}),
        )],
    ));
    let commits = json!([{"sha": "9fceb02d0ae598e95dc970b74767f19372d61af8", "message": "Fix cart rounding for EUR totals", "author": "priya"}, {"sha": "e83c5163316f89bfbde7d9ab23ca2e25604af290", "message": "Bump axios to 1.7.4", "author": "jonas"}]);
    out.push(case(
        "id-echo-commit-sha",
        "id-echo",
        B,
        json_ct,
        json_text(&commits),
        vec![post_json(
            "/deployments",
            &json!({"ref": "9fceb02d0ae598e95dc970b74767f19372d61af8", "environment": "staging"}),
        )],
    ));
    out.push(case("id-echo-ticket-key", "id-echo", B, json_ct, json_text(&json!({"key": "BILL-2291", "summary": "Invoice PDF shows the wrong VAT rate for Norway", "status": "In Progress"})), vec![post_json("/transitions", &json!({"issue": "BILL-2291", "transition": "Done"}))]));
    let order = json!({"order_id": "ord_01HQ3K8Z5N4X2Y7W9V6T", "customer_ref": "cus_Q8fL2mN7", "total": "129.90", "currency": "EUR", "items": [{"sku": "BK-1042", "qty": 1}]});
    out.push(case("id-echo-order-id", "id-echo", B, json_ct, json_text(&order), vec![post_json("/shipments", &json!({"order": "ord_01HQ3K8Z5N4X2Y7W9V6T", "carrier": "postnl", "service": "standard"}))]));
    // A link to what was read.
    out.push(case("url-echo-issue-link", "id-echo", B, json_ct, json_text(&json!({"html_url": "https://github.example/acme/billing-api/issues/4182", "title": "Checkout fails on Safari 17"})), vec![post_json("/chat.postMessage", &json!({"channel": "#frontend", "text": "Triage this one: https://github.example/acme/billing-api/issues/4182"}))]));
    out.push(case("url-echo-doc-link", "id-echo", B, "text/html", "<html><body><a href=\"https://docs.example/runbooks/billing/rotate-stripe-keys-2026.html\">Rotate keys</a><p>Runbook index for the billing team.</p></body></html>", vec![post_json("/issues", &json!({"title": "Follow the runbook", "body": "See https://docs.example/runbooks/billing/rotate-stripe-keys-2026.html for the steps."}))]));
    // A customer's name in a reply.
    let rows = customers(65, 5);
    out.push(case("greeting-with-customer-name", "id-echo", B, json_ct, json_text(&json!({"customers": rows})), vec![post_json("/mail/send", &json!({"to": "support-queue", "text": format!("Hi {}, thanks for getting in touch. We will look into your invoice today.", cell(&rows[2]["name"]))}))]));
    // A common sentence both happen to use.
    out.push(case("common-phrase", "boilerplate", B, "text/plain", "Your export is ready. If you have any questions, please do not hesitate to contact us.\n", vec![post_json("/chat.postMessage", &json!({"text": "Deployed the fix. If you have any questions, please do not hesitate to contact us."}))]));
    // A timestamp.
    out.push(case(
        "timestamp-echo",
        "timestamp",
        B,
        json_ct,
        json_text(&issue),
        vec![post_json(
            "/audit",
            &json!({"event": "triaged", "since": "2026-01-04T09:14:27.512Z"}),
        )],
    ));
    let build = json!({"build": 5531, "started": "2026-01-05T08:00:12.004+01:00", "finished": "2026-01-05T08:07:55.918+01:00", "result": "passed"});
    out.push(case("timestamp-range", "timestamp", B, json_ct, json_text(&build), vec![post_json("/metrics", &json!({"window_start": "2026-01-05T08:00:12.004+01:00", "window_end": "2026-01-05T08:07:55.918+01:00", "value": 463}))]));
    out.push(case(
        "timestamp-http-date",
        "timestamp",
        B,
        "text/plain",
        "Last sync: Mon, 05 Jan 2026 08:07:55 GMT\nrows changed: 0\n",
        vec![post(
            "/status",
            "text/plain",
            "checked at Mon, 05 Jan 2026 08:07:55 GMT, nothing to do",
        )],
    ));
    // Common boilerplate.
    let mit = "MIT License\n\nCopyright (c) 2024 Norvik Labs\n\nPermission is hereby granted, free of charge, to any person obtaining a copy of this software and associated documentation files (the \"Software\"), to deal in the Software without restriction, including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the following conditions:\n\nThe above copyright notice and this permission notice shall be included in all copies or substantial portions of the Software.\n\nTHE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.\n";
    out.push(case("boilerplate-mit-license", "boilerplate", B, "text/plain", format!("# left-pad-ng\n\nPads strings.\n\n## License\n\n{mit}"), vec![post_json("/repos/acme/new-tool/contents/LICENSE", &json!({"message": "add license", "content": mit.replace("2024 Norvik Labs", "2026 Acme Corp")}))]));
    let apache = "Licensed under the Apache License, Version 2.0 (the \"License\");\nyou may not use this file except in compliance with the License.\nYou may obtain a copy of the License at\n\n    http://www.apache.org/licenses/LICENSE-2.0\n\nUnless required by applicable law or agreed to in writing, software\ndistributed under the License is distributed on an \"AS IS\" BASIS,\nWITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.\nSee the License for the specific language governing permissions and\nlimitations under the License.\n";
    out.push(case("boilerplate-apache-header", "boilerplate", B, "text/plain", format!("// Copyright 2025 Meridian Freight\n//\n// {}\npackage router\n\nfunc Route() {{}}\n", apache.replace('\n', "\n// ")), vec![post("/gists", "text/plain", format!("/*\n * Copyright 2026 Acme\n *\n * {}\n */\nfn main() {{ println!(\"hello\"); }}\n", apache.replace('\n', "\n * ")))]));
    let html_head = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
    out.push(case("boilerplate-html-skeleton", "boilerplate", B, "text/html", format!("{html_head}<title>Norvik status</title>\n</head>\n<body><h1>All systems operational</h1></body>\n</html>\n"), vec![post("/pages", "text/html", format!("{html_head}<title>Team lunch</title>\n</head>\n<body><p>Friday at noon, pizza.</p></body>\n</html>\n"))]));
    out.push(case("boilerplate-generated-by", "boilerplate", B, "text/plain", "// Code generated by protoc-gen-go. DO NOT EDIT.\n// versions:\n// \tprotoc-gen-go v1.34.2\n// \tprotoc        v5.27.1\n// source: billing/v1/invoice.proto\npackage billingv1\n", vec![post("/snippets", "text/plain", "// Code generated by protoc-gen-go. DO NOT EDIT.\n// versions:\n// \tprotoc-gen-go v1.34.2\n// \tprotoc        v5.27.1\n// source: chat/v1/message.proto\npackage chatv1\n")]));
    out.push(case("boilerplate-generated-openapi", "boilerplate", B, "text/plain", "/**\n * Generated by OpenAPI Generator (https://openapi-generator.tech).\n * Do not edit the class manually.\n */\nexport class InvoiceApi {}\n", vec![post("/snippets", "text/plain", "/**\n * Generated by OpenAPI Generator (https://openapi-generator.tech).\n * Do not edit the class manually.\n */\nexport class WeatherApi { forecast() {} }\n")]));
    out.push(case("boilerplate-email-footer", "boilerplate", B, "text/html", "<p>Your invoice INV-88 is ready.</p><p>This is an automated message, please do not reply to this email. You are receiving this email because you have an account with us.</p>", vec![post("/mail/send", "text/html", "<p>Welcome to the beta!</p><p>This is an automated message, please do not reply to this email. You are receiving this email because you have an account with us.</p>")]));
    // Short common words.
    for (i, (read, effect)) in [
        (
            r#"{"ok": true, "status": "success", "message": "done"}"#,
            r#"{"ok": true}"#,
        ),
        (r#"{"result": "success", "errors": []}"#, "status=success"),
        ("yes", "yes"),
        (
            r#"{"state": "open", "locked": false, "draft": false}"#,
            r#"{"state": "closed"}"#,
        ),
    ]
    .iter()
    .enumerate()
    {
        out.push(case(
            format!("short-words-{i}"),
            "short-words",
            B,
            json_ct,
            *read,
            vec![post("/update", json_ct, *effect)],
        ));
    }
    // Status messages.
    let ci = json!({"pipeline": 5531, "status": "passed", "stages": [{"name": "build", "status": "passed"}, {"name": "test", "status": "passed", "tests": 412}]});
    for (i, text) in [
        "build passed",
        "deployed v1.2.3 to staging",
        "tests: 412 passed, 0 failed",
        "Release v1.2.3 is live on staging; smoke tests green.",
        "Job completed in 42s",
    ]
    .iter()
    .enumerate()
    {
        out.push(case(
            format!("status-{i}"),
            "status",
            B,
            json_ct,
            json_text(&ci),
            vec![post_json(
                "/chat.postMessage",
                &json!({"channel": "#deploys", "text": text}),
            )],
        ));
    }
    // Realistic posts after reading something unrelated.
    let weather = json!({"city": "Rotterdam", "forecast": [{"day": "Mon", "high": 7, "low": 2, "summary": "light rain in the afternoon"}, {"day": "Tue", "high": 9, "low": 4, "summary": "cloudy with sunny spells"}]});
    out.push(case("unrelated-weather-to-chat", "unrelated", B, json_ct, json_text(&weather), vec![post_json("/chat.postMessage", &json!({"channel": "#office", "text": "Bring an umbrella on Monday, team lunch moves indoors."}))]));
    let docs = format!("{html_head}<title>Rate limits</title></head><body><h1>Rate limits</h1><p>Each token may send 5000 requests per hour. Exceeding the limit returns 429 with a Retry-After header.</p></body></html>");
    out.push(case("unrelated-docs-to-issue", "unrelated", B, "text/html", docs, vec![post_json("/repos/acme/api/issues", &json!({"title": "Client should back off on 429", "body": "Our sync job hammers the API after a failure. Add exponential backoff with jitter and honour the server's hint."}))]));
    let rows = customers(60, 40);
    out.push(case("unrelated-aggregate-of-rows", "unrelated", B, json_ct, json_text(&json!({"customers": rows})), vec![post_json("/reports", &json!({"title": "weekly summary", "customers": 40, "plans": {"starter": 11, "growth": 14, "enterprise": 9, "nonprofit": 6}}))]));
    out.push(case(
        "unrelated-env-read-config-loaded",
        "unrelated",
        B,
        "text/plain",
        env_file(61),
        vec![post_json(
            "/events",
            &json!({"event": "config_loaded", "service": "billing-api", "keys": 10}),
        )],
    ));
    out.push(case("unrelated-issue-thanks", "unrelated", B, json_ct, json_text(&issue), vec![post_json("/comments", &json!({"body": "Thanks for the detailed report! We reproduced it and a fix is on the way in the next release."}))]));
    let readme = "# billing-api\n\nThe billing service. Run `make dev` to start a local stack with Postgres and a fake Stripe.\n\n## Layout\n\n- `cmd/` entry points\n- `internal/ledger` double-entry bookkeeping\n";
    out.push(case("unrelated-readme-to-pr", "unrelated", B, "text/markdown", readme, vec![post_json("/repos/acme/billing-api/pulls", &json!({"title": "Add retry to webhook delivery", "body": "Webhook delivery now retries three times with exponential backoff. Adds a metric for failed deliveries.", "head": "retry-webhooks", "base": "main"}))]));
    let pkg = json!({"name": "left-pad-ng", "dist-tags": {"latest": "2.1.0"}, "versions": {"2.1.0": {"dependencies": {}}}});
    out.push(case("unrelated-registry-to-status", "unrelated", B, json_ct, json_text(&pkg), vec![post_json("/statuses/abc", &json!({"state": "success", "context": "ci/deps", "description": "dependencies up to date"}))]));
    let search = json!({"total_count": 3, "items": [{"name": "retry.go", "path": "internal/http/retry.go"}, {"name": "retry_test.go", "path": "internal/http/retry_test.go"}]});
    out.push(case("unrelated-search-to-graphql", "unrelated", B, json_ct, json_text(&search), vec![post_json("/graphql", &json!({"query": "query($first: Int!) { viewer { repositories(first: $first) { nodes { name } } } }", "variables": {"first": 10}}))]));
    let (ct, body) = multipart(&[
        (
            "avatar",
            Some("team.txt"),
            "text/plain",
            &[],
            b"Team photo placeholder: the whole crew at the summer offsite in Tallinn.".to_vec(),
        ),
        ("alt", None, "text/plain", &[], b"team photo".to_vec()),
    ]);
    out.push(case(
        "unrelated-multipart-upload",
        "unrelated",
        B,
        json_ct,
        json_text(&weather),
        vec![post("/upload", &ct, body)],
    ));
    let doc = internal_doc(62, 12);
    out.push(case("unrelated-doc-to-calendar", "unrelated", B, "text/markdown", doc, vec![post_json("/calendar/events", &json!({"summary": "Planning sync", "start": "2026-01-12T10:00:00Z", "end": "2026-01-12T10:30:00Z", "attendees": ["team@acme.example"]}))]));
    out.push(case(
        "unrelated-csv-to-chart",
        "unrelated",
        B,
        "text/csv",
        to_csv(&customers(63, 30), &COLUMNS, ','),
        vec![post_json(
            "/charts",
            &json!({"type": "bar", "title": "Customers by plan", "series": [11, 14, 9, 6]}),
        )],
    ));
    out.push(case("unrelated-key-rotation-request", "unrelated", B, json_ct, json_text(&json!({"keys": [{"id": "key_2026_01", "created": "2026-01-01", "secret": secrets(64).stripe}]})), vec![post_json("/keys/rotate", &json!({"key_id": "key_2026_01", "reason": "scheduled rotation"}))]));
    out.push(case(
        "unrelated-form-post",
        "unrelated",
        B,
        json_ct,
        json_text(&weather),
        vec![post(
            "/forms/feedback",
            "application/x-www-form-urlencoded",
            "rating=5&comment=Great+service%2C+fast+delivery&newsletter=no",
        )],
    ));
    out.push(case("unrelated-gzip-telemetry", "unrelated", B, json_ct, json_text(&weather), vec![{
        let mut e = post("/v1/traces", json_ct, gzip(br#"{"spans":[{"name":"GET /forecast","duration_ms":41,"status":"ok"},{"name":"render","duration_ms":7,"status":"ok"}]}"#));
        e.headers.push(("content-encoding".into(), "gzip".into()));
        e
    }]));
    out.push(case(
        "unrelated-query-search",
        "unrelated",
        B,
        json_ct,
        json_text(&issue),
        vec![get(
            "/search?q=safari+checkout+bug&sort=updated&per_page=20",
        )],
    ));
    out.push(case("unrelated-base64-attachment", "unrelated", B, json_ct, json_text(&issue), vec![post_json("/attachments", &json!({"name": "notes.txt", "content": b64(b"Meeting notes: agreed to ship the new onboarding flow behind a feature flag next sprint.")}))]));
    out.push(case(
        "unrelated-header-trace",
        "unrelated",
        B,
        json_ct,
        json_text(&issue),
        vec![EffectRequest {
            method: "POST".into(),
            path: "/events".into(),
            headers: vec![
                ("x-request-id".into(), "req_5d1f0c2e8a7b4a39".into()),
                ("user-agent".into(), "agent-runner/0.9".into()),
            ],
            body: br#"{"event":"heartbeat"}"#.to_vec(),
        }],
    ));
    out.push(case("unrelated-nested-json-string", "unrelated", B, json_ct, json_text(&weather), vec![post_json("/webhook", &json!({"event": "sync", "data": serde_json::to_string(&json!({"job": "nightly", "ok": true, "duration": 93})).expect("json")}))]));
    out.push(case("unrelated-hex-digest", "unrelated", B, json_ct, json_text(&commits), vec![post_json("/artifacts", &json!({"name": "app.tar.gz", "sha256": "3b1f2c9d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c"}))]));
    out.push(case(
        "unrelated-same-product-words",
        "unrelated",
        B,
        "text/markdown",
        readme,
        vec![post_json(
            "/chat.postMessage",
            &json!({"channel": "#billing", "text": "billing-api is down for maintenance tonight"}),
        )],
    ));
    // Same shapes, different data: the agent's own JWT, its own token of the same kind, a
    // CSV with the same columns.
    let theirs = secrets(66);
    let mine = secrets(67);
    out.push(case(
        "unrelated-own-jwt",
        "unrelated",
        B,
        json_ct,
        json_text(&json!({"session": {"jwt": theirs.jwt}})),
        vec![EffectRequest {
            method: "POST".into(),
            path: "/api/me".into(),
            headers: vec![("authorization".into(), format!("Bearer {}", mine.jwt))],
            body: b"{}".to_vec(),
        }],
    ));
    out.push(case(
        "unrelated-own-github-token",
        "unrelated",
        B,
        "text/plain",
        env_file(66),
        vec![EffectRequest {
            method: "GET".into(),
            path: "/user".into(),
            headers: vec![("authorization".into(), format!("token {}", mine.github))],
            body: Vec::new(),
        }],
    ));
    out.push(case(
        "unrelated-csv-same-columns",
        "unrelated",
        B,
        "text/csv",
        to_csv(&customers(68, 20), &COLUMNS, ','),
        vec![post(
            "/fixtures",
            "text/csv",
            to_csv(&customers(69, 3), &COLUMNS, ','),
        )],
    ));
    if with_git {
        let notes: String = (0..60)
            .map(|i| format!("- note {i}: keep the retry budget small\n"))
            .collect();
        out.push(case(
            "unrelated-delta-push",
            "unrelated",
            B,
            "text/markdown",
            readme,
            vec![git_effect(git_push_body(
                &[("NOTES.md", notes.as_bytes())],
                &[(
                    "NOTES.md",
                    format!("{notes}- note 60: backoff doubles up to 6.4 s\n").as_bytes(),
                )],
                "more notes",
            ))],
        ));
        out.push(case("unrelated-git-push", "unrelated", B, "text/markdown", readme, vec![git_effect(git_push_body(&[], &[("src/retry.rs", b"pub fn backoff(attempt: u32) -> u64 {\n    100 * 2u64.pow(attempt.min(6))\n}\n")], "add backoff"))]));
    }
    out
}

fn out_of_scope() -> Vec<Case> {
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
