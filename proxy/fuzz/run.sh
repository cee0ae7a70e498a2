#!/usr/bin/env bash
# Builds the request-head fuzz target with libFuzzer's coverage instrumentation on the
# stable toolchain (the flags cargo-fuzz passes, minus the nightly-only sanitizer) and runs
# it for SECONDS (default 60) on the seed corpus. Usage: proxy/fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/fuzz"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros (as cargo-fuzz does).
triple="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --locked --release --target "$triple" --bin request_head
mkdir -p artifacts
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp corpus/request_head/* "$work/"
"$CARGO_TARGET_DIR/$triple/release/request_head" "$work" -max_total_time="$seconds" -max_len=2048 \
  -dict=request_head.dict -artifact_prefix=artifacts/
