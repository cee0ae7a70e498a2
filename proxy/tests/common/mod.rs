//! What the command-line test files share: running the `airlock` binary.

use std::process::Command;

/// The `airlock` binary this package builds, ready for arguments.
pub fn airlock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
}
