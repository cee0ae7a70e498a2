//! Run tokens without plaintext in the ledger (issue 35, item 5; docs/fleet.md, "The run
//! token key").
//!
//! A run's token is not random and not stored: it is derived from the run's id with a key
//! kept in the data directory (`DATA/run-token.key`, 32 random bytes as 64 hex digits,
//! mode 0600, created once):
//!
//! ```text
//! token = hex(HMAC-SHA256(key, "airlock run token v1\0" || run_id))[..48]
//! ```
//!
//! so the ledger holds nothing a reader could present as a run, and the server can give
//! the token back to the run's creator at any time (`GET /v1/runs/{id}/env`). Every
//! airlock process that authenticates runs or hands out their tokens (on a shared
//! PostgreSQL store, every proxy and control instance) needs the same key file, like the
//! placeholder key.
//!
//! Runs recorded before (a random token stored in plaintext as the record's `token`) are
//! rewritten when the server opens the ledger ([`crate::RunStore::hash_plaintext_tokens`]):
//! the record then keeps only `token_hash = hex(HMAC-SHA256(key, "airlock legacy run token
//! v1\0" || token))`, and that token keeps working. Every comparison is in constant time.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::model::{Run, RunId};

/// The key file's name in the data directory.
pub const RUN_TOKEN_KEY_FILE: &str = "run-token.key";

/// Hex digits of a derived token: 24 bytes of the HMAC, as long as the random tokens were.
pub const TOKEN_HEX_LEN: usize = 48;

const DERIVE_CONTEXT: &[u8] = b"airlock run token v1\0";
const LEGACY_CONTEXT: &[u8] = b"airlock legacy run token v1\0";
const KEY_ID_CONTEXT: &[u8] = b"airlock run token key id v1\0";

/// Why the run token key could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum TokenKeyError {
    /// The file could not be read, created or written.
    #[error("cannot read or create the run token key {path}: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file exists but does not hold 64 hex digits.
    #[error("the run token key {path} is not 64 hex digits; restore it (every run's token is derived from it) or remove it to make a new one, which invalidates the tokens of open runs")]
    Malformed {
        /// The key file.
        path: PathBuf,
    },
}

/// The key run tokens are derived from and legacy tokens hashed with.
#[derive(Clone)]
pub struct RunTokens {
    key: [u8; 32],
}

impl std::fmt::Debug for RunTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTokens")
            .field("key_id", &self.key_id())
            .finish()
    }
}

impl RunTokens {
    /// A key given as bytes (tests, and callers that keep the key elsewhere).
    pub fn from_key(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// Reads `DIR/run-token.key`, or creates it (32 random bytes as hex, mode 0600,
    /// `O_EXCL`: of two processes creating it at once, both read the one that won).
    ///
    /// Errors: [`TokenKeyError::Io`] when it cannot be read or created,
    /// [`TokenKeyError::Malformed`] when it holds anything but 64 hex digits (never
    /// replaced silently: every open run's token depends on it).
    pub fn load_or_create(dir: &Path) -> Result<Self, TokenKeyError> {
        let path = dir.join(RUN_TOKEN_KEY_FILE);
        let io = |source| TokenKeyError::Io {
            path: path.clone(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => return Self::parse(&text).ok_or(TokenKeyError::Malformed { path }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io(error)),
        }
        use rand::RngCore;
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        match options.open(&path) {
            Ok(mut file) => {
                file.write_all(format!("{}\n", hex(&key)).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io)?;
                Ok(Self { key })
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(&path).map_err(io)?;
                Self::parse(&text).ok_or(TokenKeyError::Malformed { path })
            }
            Err(error) => Err(io(error)),
        }
    }

    fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self { key })
    }

    fn mac(&self, context: &[u8], data: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(context);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// The token of run `id`: 48 lowercase hex digits.
    pub fn token_for(&self, id: &RunId) -> String {
        let mut token = hex(&self.mac(DERIVE_CONTEXT, id.0.as_bytes()));
        token.truncate(TOKEN_HEX_LEN);
        token
    }

    /// The keyed hash a plaintext `token` of an old record is kept as (64 hex digits).
    pub fn hash_legacy(&self, token: &str) -> String {
        hex(&self.mac(LEGACY_CONTEXT, token.as_bytes()))
    }

    /// The token of `run`, when the server can give it back: the derived one, or the
    /// plaintext of a record not yet rewritten; `None` for a run created before derived
    /// tokens whose token is now kept only as a hash (its creator has it).
    pub fn recover(&self, run: &Run) -> Option<String> {
        match (&run.token_hash, &run.plaintext_token) {
            (Some(_), _) => None,
            (None, Some(plaintext)) => Some(plaintext.clone()),
            (None, None) => Some(self.token_for(&run.id)),
        }
    }

    /// Whether `presented` is `run`'s token, compared in constant time.
    pub fn verify(&self, run: &Run, presented: &str) -> bool {
        match (&run.token_hash, &run.plaintext_token) {
            (Some(hash), _) => crate::rules::constant_time_eq(
                self.hash_legacy(presented).as_bytes(),
                hash.as_bytes(),
            ),
            (None, Some(plaintext)) => {
                crate::rules::constant_time_eq(plaintext.as_bytes(), presented.as_bytes())
            }
            (None, None) => crate::rules::constant_time_eq(
                self.token_for(&run.id).as_bytes(),
                presented.as_bytes(),
            ),
        }
    }

    /// A public name of the key (16 hex digits of an HMAC of a fixed text): the same on
    /// every process that shares the key, logged at start so a fleet's instances can be
    /// compared without showing the key.
    pub fn key_id(&self) -> String {
        let mut id = hex(&self.mac(KEY_ID_CONTEXT, b""));
        id.truncate(16);
        id
    }

    /// Rewrites `run` in place when it holds a plaintext token: `token_hash` set, the
    /// plaintext gone. Returns whether it changed.
    pub fn seal(&self, run: &mut Run) -> bool {
        match run.plaintext_token.take() {
            Some(plaintext) => {
                if run.token_hash.is_none() {
                    run.token_hash = Some(self.hash_legacy(&plaintext));
                }
                true
            }
            None => false,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_derived_verified_and_legacy_ones_hashed() {
        let tokens = RunTokens::from_key([7; 32]);
        let mut run = crate::rules::new_run(RunId::generate(), None, None, 1);
        let token = tokens.token_for(&run.id);
        assert_eq!(token.len(), TOKEN_HEX_LEN);
        assert!(tokens.verify(&run, &token));
        assert!(!tokens.verify(&run, "wrong"));
        assert!(!RunTokens::from_key([8; 32]).verify(&run, &token));
        assert_eq!(tokens.recover(&run), Some(token.clone()));
        run.plaintext_token = Some("old".into());
        assert!(tokens.verify(&run, "old") && !tokens.verify(&run, &token));
        assert!(tokens.seal(&mut run));
        assert!(run.plaintext_token.is_none());
        assert!(tokens.verify(&run, "old") && !tokens.verify(&run, &token));
        assert_eq!(tokens.recover(&run), None);
        assert!(!tokens.seal(&mut run));
    }

    #[test]
    fn the_key_file_is_created_once_private_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = RunTokens::load_or_create(dir.path()).expect("created");
        let again = RunTokens::load_or_create(dir.path()).expect("read");
        assert_eq!(first.key_id(), again.key_id());
        let path = dir.path().join(RUN_TOKEN_KEY_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "nope\n").expect("write");
        assert!(matches!(
            RunTokens::load_or_create(dir.path()),
            Err(TokenKeyError::Malformed { .. })
        ));
    }
}
