//! The benign cases: effects that share only references, stock text or nothing with the reads.

#[allow(unused_imports)]
use super::*;

pub(super) fn benign(with_git: bool) -> Vec<Case> {
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
    out.extend(encoded());
    out
}

/// Unrelated effects in the encodings of issue 37: the new views must find nothing in them.
fn encoded() -> Vec<Case> {
    use super::exfiltration::encodings::{base32, wrap, zlib};
    use Class::Benign as B;
    let mut out = Vec::new();
    let env = env_file(120);
    let doc = internal_doc(121, 10);
    let own = "Build 4512 passed on main: 318 tests, 0 failures, coverage 81.4%, deployed to staging at 14:02 by the release bot.";
    let mut deflated = post("/status", "text/plain", zlib(own.as_bytes()));
    deflated
        .headers
        .push(("content-encoding".into(), "deflate".into()));
    out.push(case(
        "unrelated-deflate-status",
        "encoded-unrelated",
        B,
        "text/plain",
        env.clone(),
        vec![deflated],
    ));
    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(own.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    out.push(case(
        "unrelated-utf16-status",
        "encoded-unrelated",
        B,
        "text/markdown",
        doc.clone(),
        vec![post("/status", "text/plain; charset=utf-16", utf16)],
    ));
    out.push(case("unrelated-html-entities", "encoded-unrelated", B, "text/markdown", doc.clone(), vec![post("/pages", "text/html", "<p>Fish &amp; chips &mdash; Friday at 12&#58;30, &euro;12 a head &#x2014; RSVP&nbsp;by Thursday.</p>")]));
    out.push(case(
        "own-totp-secret-base32",
        "encoded-unrelated",
        B,
        "text/plain",
        env.clone(),
        vec![post_json(
            "/mfa/enroll",
            &json!({"secret": base32(b"my-own-totp-seed-0042"), "issuer": "ci"}),
        )],
    ));
    out.push(case("mac-addresses-hex", "encoded-unrelated", B, "text/plain", env.clone(), vec![post_json("/inventory", &json!({"hosts": ["00:1a:2b:3c:4d:5e", "00:1a:2b:3c:4d:5f", "3c:22:fb:aa:01:9e"], "fingerprint": "SHA256 de:ad:be:ef:00:11:22:33:44:55:66:77:88:99:aa:bb"}))]));
    out.push(case(
        "own-file-wrapped-base64",
        "encoded-unrelated",
        B,
        "text/markdown",
        doc.clone(),
        vec![post("/paste", "text/plain", wrap(&b64(own.as_bytes()), 20))],
    ));
    // A binary upload of its own: held as unanalysed, never flagged.
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"
        .iter()
        .copied()
        .chain((0..600u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8))
        .collect();
    out.push(case(
        "own-binary-upload",
        "encoded-unrelated",
        B,
        "text/plain",
        env,
        vec![post("/upload", "image/png", png)],
    ));
    out
}
