//! Values every record uses, apart from the records themselves: content digests and
//! wall-clock milliseconds.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Content digest of a body: the algorithm, a colon and 64 lowercase hex digits.
/// Effect bodies (and approvals, which bind one) use `sha256:`; read journal records use
/// `blake3:` (BLAKE3, <https://github.com/BLAKE3-team/BLAKE3-specs>, 256-bit output, as
/// `b3sum` prints it): SHA-256 of each relayed body had been 29% of airlock's CPU on a
/// 64 KiB pass (docs/performance.md, fifth round). Reads journaled by earlier builds carry
/// `sha256:`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Digest(pub String);

impl Digest {
    /// The SHA-256 digest of `bytes` (effect bodies).
    pub fn sha256_of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self::from_sha256(sha2::Sha256::digest(bytes).as_slice())
    }

    /// Wraps a finished 32-byte SHA-256 output.
    pub fn from_sha256(hash: &[u8]) -> Self {
        Self::tagged("sha256:", hash)
    }

    /// Wraps a finished 32-byte BLAKE3 output.
    pub fn from_blake3(hash: &[u8]) -> Self {
        Self::tagged("blake3:", hash)
    }

    /// `algorithm` (with its colon) followed by `hash` in lowercase hex.
    fn tagged(algorithm: &str, hash: &[u8]) -> Self {
        let mut text = String::with_capacity(algorithm.len() + hash.len() * 2);
        text.push_str(algorithm);
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for byte in hash {
            text.push(char::from(HEX[usize::from(byte >> 4)]));
            text.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Self(text)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
