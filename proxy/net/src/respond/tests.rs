//! Tests of the refusal bodies and statuses.

use super::*;

#[test]
fn a_rate_limit_is_429_with_retry_after_and_the_limits_fields() {
    let error = ProxyError::OverLimit {
        rule: "slow".into(),
        limit: RuleLimit::RequestsPerMinute,
        value: 2,
        reason: "too many".into(),
        policy_revision: "rev".into(),
    };
    assert_eq!(error.side(), Side::Policy);
    let body = error.body();
    assert_eq!(body["limit"], "requests_per_minute");
    assert_eq!(body["limit_value"], 2);
    assert_eq!(body["reason_code"], "limit_requests_per_minute");
    assert_eq!(body["rule"], "slow");
    assert_eq!(body["policy_revision"], "rev");
    assert_eq!(body["manifest"], MANIFEST_URL);
    let response = error.into_response();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[header::RETRY_AFTER], "60");
    assert_eq!(
        response.headers()[ERROR_HEADER],
        "limit_requests_per_minute"
    );
}

#[test]
fn upstream_codes_and_hints_follow_the_failure_not_the_text() {
    let error = ProxyError::Upstream {
        failure: Failure::HeadTooLarge,
        reason: "anything".into(),
    };
    assert_eq!(error.code(), "upstream_head_too_large");
    assert_eq!(error.side(), Side::Origin);
    let error = ProxyError::Upstream {
        failure: Failure::Other,
        reason: "message head is too large, certificate".into(),
    };
    assert_eq!(error.code(), "upstream_unreachable");
    assert_eq!(
        error.body()["hint"],
        "check that the origin is up and reachable"
    );
}
