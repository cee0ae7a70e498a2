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

fn git_effect(body: Vec<u8>) -> EffectRequest {
    post(
        "/acme/billing.git/git-receive-pack",
        "application/x-git-receive-pack-request",
        body,
    )
}

mod benign;
mod exfiltration;
mod out_of_scope;

use benign::benign;
use exfiltration::exfiltration;
use out_of_scope::out_of_scope;
