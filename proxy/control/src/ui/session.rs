//! Browser sessions of the review UI: a cookie that proves its holder presented a
//! reviewer's token, and the per-session CSRF token every state-changing form carries.
//!
//! The cookie is `NAME.EXPIRY_MS.MAC` with `MAC = HMAC-SHA256(KEY, "session|NAME|EXPIRY_MS")`
//! (RFC 2104), where `KEY` is the SHA-256 of the holder's token
//! ([`Principal::session_key`]), so it is bound to that token: replacing the token ends
//! every session made with it, and the server keeps no session table. The role is the
//! token's, looked up at each request, so a session never outlives a change of role. It is
//! `HttpOnly` and `SameSite=Strict` (RFC 6265bis §5.4.7): a page of another site cannot make
//! the browser send it, and the CSRF token (`HMAC(KEY, "csrf|" + cookie)`) is checked on
//! every POST besides.

use sha2::{Digest as _, Sha256};

use crate::access::Principal;

/// Name of the session cookie.
pub const COOKIE: &str = "airlock_session";
/// How long a session lasts: 12 hours, in milliseconds.
pub const SESSION_MS: u64 = 12 * 60 * 60 * 1000;

/// HMAC-SHA256 of `message` under `key` (RFC 2104).
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two strings in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new session cookie value for `reviewer`, valid until `now_ms + SESSION_MS`.
pub fn issue(principal: &Principal, now_ms: u64) -> String {
    let expiry = now_ms + SESSION_MS;
    let mac = hmac(
        principal.session_key(),
        format!("session|{}|{expiry}", principal.name).as_bytes(),
    );
    format!("{}.{expiry}.{}", principal.name, hex(&mac))
}

/// The reviewer a session cookie value proves, if it is genuine and not expired.
pub fn verify<'a>(value: &str, principals: &'a [Principal], now_ms: u64) -> Option<&'a Principal> {
    let mut parts = value.rsplitn(3, '.');
    let (mac, expiry, name) = (parts.next()?, parts.next()?, parts.next()?);
    let expiry_ms: u64 = expiry.parse().ok()?;
    if expiry_ms <= now_ms {
        return None;
    }
    let principal = principals.iter().find(|r| r.name == name)?;
    let expected = hmac(
        principal.session_key(),
        format!("session|{name}|{expiry}").as_bytes(),
    );
    same(mac, &hex(&expected)).then_some(principal)
}

/// The CSRF token of the session whose cookie value is `cookie`.
pub fn csrf(principal: &Principal, cookie: &str) -> String {
    hex(&hmac(
        principal.session_key(),
        format!("csrf|{cookie}").as_bytes(),
    ))
}

/// The value of cookie `name` in a `Cookie` request header (RFC 6265 §5.4).
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        (key == name).then_some(value)
    })
}

/// The `Set-Cookie` value that stores `value` as the session.
pub fn set_cookie(value: &str) -> String {
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_MS / 1000
    )
}

/// The `Set-Cookie` value that ends the session.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::access::Role;

    fn reviewers() -> Vec<Principal> {
        vec![
            Principal::new("admin", Role::Admin, "t0ken-admin-0000000000"),
            Principal::new("alice", Role::Reviewer, "t0ken-alice-0000000000"),
        ]
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn sessions_are_bound_to_name_token_and_time() {
        let list = reviewers();
        let cookie = issue(&list[1], 1_000);
        assert_eq!(
            verify(&cookie, &list, 2_000).map(|r| r.name.as_str()),
            Some("alice")
        );
        assert!(
            verify(&cookie, &list, 1_000 + SESSION_MS).is_none(),
            "expired"
        );
        let forged = cookie.replacen("alice", "admin", 1);
        assert!(verify(&forged, &list, 2_000).is_none(), "renamed");
        let mut other = list.clone();
        other[1] = Principal::new("alice", Role::Reviewer, "rotated-token-0000000000");
        assert!(verify(&cookie, &other, 2_000).is_none(), "token rotated");
        assert!(verify("garbage", &list, 0).is_none());
        assert_ne!(csrf(&list[1], &cookie), csrf(&list[0], &cookie));
    }

    #[test]
    fn cookie_header_parsing() {
        assert_eq!(
            cookie_value("a=1; airlock_session=x.y.z; b=2", COOKIE),
            Some("x.y.z")
        );
        assert_eq!(cookie_value("a=1", COOKIE), None);
    }
}
