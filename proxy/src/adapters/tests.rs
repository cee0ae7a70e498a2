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
