//! Unit tests of the adapters' pure parts: git's pkt-lines and report-status.

use super::git::{accepted_report, check_report, parse_push, pkt_line, pkt_lines};

const OLD: &str = "1111111111111111111111111111111111111111";
const NEW: &str = "2222222222222222222222222222222222222222";

fn push_body(caps: &str) -> Vec<u8> {
    let mut body = pkt_line(format!("{OLD} {NEW} refs/heads/main\0{caps}\n").as_bytes());
    body.extend(pkt_line(
        format!("{OLD} {NEW} refs/heads/other\n").as_bytes(),
    ));
    body.extend_from_slice(b"0000PACK....");
    body
}

#[test]
fn commands_and_capabilities_are_parsed() {
    let push =
        parse_push(&push_body("report-status side-band-64k agent=git/2.43")).expect("a push");
    assert_eq!(push.commands.len(), 2);
    assert_eq!(push.commands[1].name, "refs/heads/other");
    assert!(push.capabilities.contains(&"side-band-64k".to_owned()));
    assert!(parse_push(b"hello").is_none());
    let review = super::git::review_of(&push_body("report-status")).expect("a push");
    assert!(review.commits.is_empty());
    assert!(
        review.notes.iter().any(|n| n.contains("no readable pack")),
        "{:?}",
        review.notes
    );
}

#[test]
fn the_accepted_report_is_framed_as_asked() {
    let plain = accepted_report(&parse_push(&push_body("report-status")).expect("push"));
    assert_eq!(
        plain,
        b"000eunpack ok\n0017ok refs/heads/main\n0018ok refs/heads/other\n0000".to_vec()
    );
    let banded =
        accepted_report(&parse_push(&push_body("report-status side-band-64k")).expect("push"));
    let (lines, _) = pkt_lines(&banded);
    assert_eq!(lines.len(), 2, "one band-1 packet and a flush");
    assert_eq!(lines[0].expect("data")[0], 1);
    assert_eq!(&lines[0].expect("data")[1..], plain.as_slice());
    assert!(accepted_report(&parse_push(&push_body("side-band-64k")).expect("push")) == b"0000");
}

#[test]
fn an_ng_in_the_origin_report_is_a_failure_with_gits_reason() {
    let push = parse_push(&push_body("report-status")).expect("push");
    let ok = accepted_report(&push);
    assert_eq!(check_report(&push, &ok), Ok(()));
    let mut refused = pkt_line(b"unpack ok\n");
    refused.extend(pkt_line(b"ng refs/heads/main failed to update ref\n"));
    refused.extend_from_slice(b"0000");
    let reason = check_report(&push, &refused).expect_err("refused");
    assert!(
        reason.contains("ng refs/heads/main failed to update ref"),
        "{reason}"
    );
    assert!(check_report(&push, b"").is_err());
}

mod shapes {
    use airlock_ledger::{Digest, Effect, EffectId, EffectState, Placeholder, RunId};
    use serde_json::{json, Value};

    use crate::{by_name, Adapter, Call};

    /// A staged effect of `call` whose placeholders get values 900+i (numbers) or `ph_i`.
    fn staged(adapter: &dyn Adapter, call: &Call<'_>) -> Effect {
        let plan = adapter.plan(call);
        Effect {
            id: EffectId("eff_test".into()),
            run_id: RunId("run_test".into()),
            seq: 1,
            method: call.method.into(),
            url: call.url.into(),
            headers: Vec::new(),
            body_digest: Digest::sha256_of(call.body),
            body_len: call.body.len() as u64,
            rule: None,
            policy_revision: String::new(),
            created_at_ms: 1_764_000_000_000,
            state: EffectState::Staged,
            state_reason: None,
            decisions: Vec::new(),
            release: None,
            placeholders: plan
                .placeholders
                .iter()
                .enumerate()
                .map(|(i, spec)| Placeholder {
                    value: match spec.kind {
                        airlock_ledger::ValueKind::Number => (900 + i).to_string(),
                        airlock_ledger::ValueKind::String => format!("ph_{i}"),
                        other => airlock_ledger::rules::placeholder_value(other, 0, 0),
                    },
                    kind: spec.kind,
                    pointer: spec.pointer.clone(),
                    real: None,
                })
                .collect(),
            depends_on: Vec::new(),
            summary: Some(plan.summary),
            adapter: Some(adapter.name().into()),
            compensates: None,
            approval: None,
            inject: None,
            retriable: false,
            earlier_releases: Vec::new(),
            idempotency: None,
            context: None,
        }
    }

    fn answer(name: &str, method: &str, url: &str, body: &Value) -> (u16, Value, Effect) {
        let adapter = by_name(name).expect("adapter");
        let bytes = body.to_string().into_bytes();
        let call = Call {
            method,
            url,
            headers: vec![("content-type".into(), "application/json".into())],
            body: &bytes,
            template: None,
            context: None,
        };
        let effect = staged(adapter, &call);
        let synthetic = adapter.respond(&call, &effect);
        let json = serde_json::from_slice(&synthetic.body).expect("JSON answer");
        (synthetic.status, json, effect)
    }

    #[test]
    fn github_contents_release_and_ref_answers_carry_their_documented_fields() {
        let (status, file, effect) = answer(
            "github",
            "PUT",
            "https://api.github.com/repos/acme/widgets/contents/docs/a.md",
            &json!({"message": "Add docs", "content": "aGVsbG8=", "branch": "agent/docs"}),
        );
        assert_eq!(status, 201);
        assert_eq!(file["content"]["path"], "docs/a.md");
        assert_eq!(file["content"]["name"], "a.md");
        assert_eq!(
            file["content"]["html_url"],
            "https://github.com/acme/widgets/blob/agent/docs/docs/a.md"
        );
        assert_eq!(file["commit"]["message"], "Add docs");
        assert!(
            file["commit"]["sha"]
                .as_str()
                .is_some_and(|s| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())),
            "a commit sha placeholder is 40 hex digits, as GitHub's: {}",
            file["commit"]["sha"]
        );
        assert_eq!(
            effect.summary.as_deref(),
            Some("create acme/widgets:docs/a.md on agent/docs: 'Add docs'")
        );

        let (status, release, _) = answer(
            "github",
            "POST",
            "https://ghe.example/api/v3/repos/acme/widgets/releases",
            &json!({"tag_name": "v1.2.0", "name": "v1.2.0"}),
        );
        assert_eq!(status, 201);
        assert_eq!(
            release["url"],
            "https://ghe.example/api/v3/repos/acme/widgets/releases/900"
        );
        assert_eq!(
            release["html_url"],
            "https://ghe.example/acme/widgets/releases/tag/v1.2.0"
        );
        assert!(release["id"].is_u64() && release["assets"].is_array());

        let (status, git_ref, _) = answer(
            "github",
            "POST",
            "https://api.github.com/repos/acme/widgets/git/refs",
            &json!({"ref": "refs/heads/fix", "sha": "aa218f56b14c9653891f9e74264a383fa43fefbd"}),
        );
        assert_eq!(status, 201);
        assert_eq!(git_ref["ref"], "refs/heads/fix");
        assert_eq!(
            git_ref["object"]["sha"],
            "aa218f56b14c9653891f9e74264a383fa43fefbd"
        );
    }

    #[test]
    fn unknown_endpoints_are_left_to_the_webhook_adapter() {
        let adapter = by_name("github").expect("github");
        let call = Call {
            method: "DELETE",
            url: "https://api.github.com/repos/acme/widgets",
            headers: Vec::new(),
            body: b"",
            template: None,
            context: None,
        };
        assert!(adapter.plan(&call).endpoint.is_none());
    }

    #[test]
    fn compensations_use_the_real_values_from_the_origins_answer() {
        let adapter = by_name("github").expect("github");
        let body = br#"{"body": "hi"}"#;
        let call = Call {
            method: "POST",
            url: "https://api.github.com/repos/acme/widgets/issues/12/comments",
            headers: Vec::new(),
            body,
            template: None,
            context: None,
        };
        let undo = adapter.compensations(&call, br#"{"id": 4242}"#);
        assert_eq!(undo.len(), 1);
        assert_eq!(undo[0].method, "DELETE");
        assert_eq!(
            undo[0].url,
            "https://api.github.com/repos/acme/widgets/issues/comments/4242"
        );

        let slack = by_name("slack").expect("slack");
        let form = b"channel=C1&text=hello+there%21";
        let call = Call {
            method: "POST",
            url: "https://slack.com/api/chat.postMessage",
            headers: Vec::new(),
            body: form,
            template: None,
            context: None,
        };
        assert_eq!(slack.plan(&call).summary, "post to C1: 'hello there!'");
        let undo = slack.compensations(&call, br#"{"ok": true, "channel": "C1", "ts": "1.5"}"#);
        assert_eq!(undo[0].url, "https://slack.com/api/chat.delete");
        assert_eq!(undo[0].body, br#"{"channel":"C1","ts":"1.5"}"#.to_vec());
    }
}

mod mcp {
    use airlock_ledger::{Digest, Effect, EffectId, EffectState, RunId};
    use serde_json::{json, Value};

    use crate::mcp::Mcp;
    use crate::{Adapter, Call};

    fn call<'a>(body: &'a [u8], accept: Option<&str>) -> Call<'a> {
        Call {
            method: "POST",
            url: "https://mcp.test:8443/mcp",
            headers: accept
                .map(|a| vec![("accept".to_owned(), a.to_owned())])
                .unwrap_or_default(),
            body,
            template: None,
            context: None,
        }
    }

    fn effect() -> Effect {
        Effect {
            id: EffectId("eff_01JZZZZZZZZZZZZZZZZZZZZZZZ".into()),
            run_id: RunId("run_01JZZZZZZZZZZZZZZZZZZZZZZZ".into()),
            seq: 1,
            method: "POST".into(),
            url: "https://mcp.test:8443/mcp".into(),
            headers: Vec::new(),
            body_digest: Digest("sha256:0".into()),
            body_len: 0,
            rule: None,
            policy_revision: "r".into(),
            created_at_ms: 0,
            state: EffectState::Staged,
            state_reason: None,
            decisions: Vec::new(),
            release: None,
            placeholders: Vec::new(),
            depends_on: Vec::new(),
            approval: None,
            inject: None,
            summary: None,
            adapter: Some("mcp".into()),
            compensates: None,
            retriable: false,
            earlier_releases: Vec::new(),
            idempotency: None,
            context: None,
        }
    }

    #[test]
    fn a_tool_call_is_planned_with_its_tool_and_answered_with_its_id() {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"name": "create_issue", "arguments": {"title": "t"}}})
        .to_string();
        let call = call(body.as_bytes(), Some("application/json, text/event-stream"));
        let plan = Mcp.plan(&call);
        assert_eq!(plan.endpoint, Some("tools/call"));
        assert!(plan.summary.contains("create_issue") && plan.summary.contains("mcp.test"));
        let answer = Mcp.respond(&call, &effect());
        assert_eq!(answer.status, 200);
        let body: Value = serde_json::from_slice(&answer.body).expect("JSON");
        assert_eq!(body["id"], 9);
        assert_eq!(body["result"]["isError"], false);
        let details = Mcp.details(&call).expect("details");
        assert_eq!(details["calls"][0]["tool"], "create_issue");
        assert_eq!(details["calls"][0]["arguments"]["title"], "t");
    }

    #[test]
    fn a_batch_a_stream_and_a_notification_are_answered_as_the_transport_says() {
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "arguments": {}}},
            {"jsonrpc": "2.0", "method": "notifications/progress"},
            {"jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": {"name": "b", "arguments": {}}}
        ])
        .to_string();
        let answer = Mcp.respond(&call(batch.as_bytes(), None), &effect());
        let body: Value = serde_json::from_slice(&answer.body).expect("JSON");
        let ids: Vec<&Value> = body
            .as_array()
            .expect("a batch")
            .iter()
            .map(|r| &r["id"])
            .collect();
        assert_eq!(ids, [&json!(1), &json!("two")]);
        let one =
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "a"}})
                .to_string();
        let streamed = Mcp.respond(&call(one.as_bytes(), Some("text/event-stream")), &effect());
        let text = String::from_utf8(streamed.body).expect("text");
        assert!(text.starts_with("event: message\ndata: {"), "{text}");
        assert!(text.ends_with("\n\n"));
        let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled"}).to_string();
        let accepted = Mcp.respond(&call(note.as_bytes(), None), &effect());
        assert_eq!((accepted.status, accepted.body.len()), (202, 0));
        assert!(Mcp.plan(&call(b"not json", None)).endpoint.is_none());
    }

    #[test]
    fn the_initialize_exchange_names_the_server_in_the_summary_and_opens_the_release_session() {
        use crate::mcp::session::{observe_initialize, McpSession};
        use crate::ReleaseSession;
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
            "clientInfo": {"name": "agent", "version": "1.2"}}})
        .to_string();
        // The server answered with one event, as FastMCP does by default.
        let answer = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"serverInfo\":{\"name\":\"issues\",\"version\":\"3\"}}}\r\n\r\n";
        let context = observe_initialize(init.as_bytes(), answer.as_bytes()).expect("context");
        assert_eq!(context["server"]["name"], "issues");
        assert_eq!(context["initialize"]["clientInfo"]["name"], "agent");
        // Not an initialize, or an error answer: nothing learnt.
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        assert!(observe_initialize(list.as_bytes(), answer.as_bytes()).is_none());
        let refused =
            json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -32600, "message": "no"}});
        assert!(observe_initialize(init.as_bytes(), refused.to_string().as_bytes()).is_none());

        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"name": "create_issue", "arguments": {"title": "t"}}})
        .to_string();
        let mut staged = call(body.as_bytes(), None);
        staged.context = Some(&context);
        assert_eq!(
            Mcp.plan(&staged).summary,
            "mcp issues.create_issue {\"title\":\"t\"}"
        );
        assert_eq!(
            Mcp.details(&staged).expect("details")["server_name"],
            "issues"
        );

        // The release session: initialize with the client's own parameters, then the
        // session id and version the server gave on every later request, then DELETE.
        let session = McpSession::for_call(&staged);
        let open: Value = serde_json::from_slice(&session.open().body).expect("JSON");
        assert_eq!(open["method"], "initialize");
        assert_eq!(
            open["params"]["clientInfo"],
            json!({"name": "agent", "version": "1.2"})
        );
        assert_eq!(open["params"]["capabilities"], json!({"sampling": {}}));
        let id = &open["id"];
        let opened = json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-03-26", "capabilities": {}, "serverInfo": {"name": "issues"}}});
        let carried = session
            .opened(
                200,
                &[("mcp-session-id".into(), "fresh".into())],
                opened.to_string().as_bytes(),
            )
            .expect("opened");
        assert_eq!(
            carried,
            [
                ("mcp-session-id".to_owned(), "fresh".to_owned()),
                ("mcp-protocol-version".to_owned(), "2025-03-26".to_owned())
            ]
        );
        let then: Value = serde_json::from_slice(&session.before_call()[0].body).expect("JSON");
        assert_eq!(then["method"], "notifications/initialized");
        assert_eq!(session.close(&carried).expect("close").method, "DELETE");
        assert!(session.opened(404, &[], b"").is_err());
        // Without a recorded initialize, airlock introduces itself.
        let bare = McpSession::for_call(&call(body.as_bytes(), None));
        let open: Value = serde_json::from_slice(&bare.open().body).expect("JSON");
        assert_eq!(open["params"]["clientInfo"]["name"], "airlock");
        // A JSON-RPC error or a tool error at release is a failure.
        let error = json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32602, "message": "bad"}});
        assert!(Mcp
            .release_failure(&staged, 200, error.to_string().as_bytes())
            .is_some());
        let fine = json!({"jsonrpc": "2.0", "id": 9, "result": {"content": [], "isError": false}});
        assert!(Mcp
            .release_failure(&staged, 200, fine.to_string().as_bytes())
            .is_none());
    }

    #[test]
    fn a_tools_list_answer_gives_the_staged_call_structured_content_of_its_schema() {
        use crate::mcp::session::{kept_context, observe_tools_list};
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        let schema = json!({"type": "object", "properties": {"number": {"type": "integer"}, "title": {"type": "string"}}, "required": ["number", "title"]});
        let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
            {"name": "create_issue", "inputSchema": {"type": "object"}, "outputSchema": schema},
            {"name": "create_label", "inputSchema": {"type": "object"}},
            {"name": "close_issue", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}]}});
        let schemas =
            observe_tools_list(list.as_bytes(), answer.to_string().as_bytes()).expect("schemas");
        assert_eq!(schemas.len(), 2, "a tool without outputSchema is not kept");
        // Another id, or an initialize: nothing learnt.
        let other = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
        assert!(observe_tools_list(other.as_bytes(), answer.to_string().as_bytes()).is_none());
        let context = json!({"output_schemas": schemas});
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"name": "create_issue", "arguments": {"title": "t"}}})
        .to_string();
        let mut staged = call(body.as_bytes(), Some("application/json, text/event-stream"));
        staged.context = Some(&context);
        let answer: Value =
            serde_json::from_slice(&Mcp.respond(&staged, &effect()).body).expect("JSON");
        assert_eq!(
            answer["result"]["structuredContent"],
            json!({"number": 0, "title": crate::mcp::schema::STAGED_STRING})
        );
        // A tool the answer gave no schema for gets none.
        let label = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                           "params": {"name": "create_label", "arguments": {}}})
        .to_string();
        let mut staged = call(label.as_bytes(), None);
        staged.context = Some(&context);
        let answer: Value =
            serde_json::from_slice(&Mcp.respond(&staged, &effect()).body).expect("JSON");
        assert!(
            answer["result"].get("structuredContent").is_none(),
            "{answer}"
        );
        // The effect keeps only the schema of the tool it calls.
        let kept = kept_context(&context, body.as_bytes());
        assert_eq!(
            kept["output_schemas"]
                .as_object()
                .map(|m| m.keys().collect::<Vec<_>>()),
            Some(vec![&"create_issue".to_owned()])
        );
    }
}
