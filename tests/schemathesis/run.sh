#!/usr/bin/env bash
# Runs schemathesis (https://schemathesis.readthedocs.io, from PyPI) against a live airlock
# admin API: airlock serve on loopback with a throwaway data directory and token, the
# schema from its own GET /v1/openapi.json, every operation fuzzed with a few examples.
# Fails on any 5xx, any answer whose status, content type or body the document does not
# describe. Bounded: at most `--max-examples` cases per operation and a hard 300 s.
#
#   tests/schemathesis/run.sh [AIRLOCK_BINARY]     (default: $CARGO_TARGET_DIR/debug/airlock)
#   SCHEMATHESIS=/path/to/schemathesis             (default: schemathesis on PATH)
#   MAX_EXAMPLES=20
#
# The workspace operations (attach, steps, decide, resume, savepoints, rollback-to) are
# left out: they snapshot and restore whatever directory a request names on this machine,
# which fuzzing must not do. The rest run against a server holding one open run, one
# sealed run and one staged effect, so the id-taking operations meet real records too.
set -euo pipefail
cd "$(dirname "$0")/../.."

airlock="${1:-${CARGO_TARGET_DIR:-$PWD/target}/debug/airlock}"
schemathesis="${SCHEMATHESIS:-schemathesis}"
max_examples="${MAX_EXAMPLES:-20}"
[ -x "$airlock" ] || { echo "no airlock binary at $airlock (cargo build -p airlock)" >&2; exit 2; }
command -v "$schemathesis" >/dev/null 2>&1 || { echo "schemathesis not found (pip install schemathesis)" >&2; exit 2; }

work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# A loopback origin nobody listens on: nothing the fuzzer releases can leave the machine.
cat >"$work/policy.toml" <<'POLICY'
version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "writes"
host = "127.0.0.1"
port = 9
method = "write"
action = "stage"
POLICY

"$airlock" serve --data "$work/data" --policy "$work/policy.toml" \
  --listen 127.0.0.1:0 --admin 127.0.0.1:0 2>"$work/airlock.log" &
pid=$!
for _ in $(seq 100); do
  [ -s "$work/data/addresses.json" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/airlock.log" >&2; exit 1; }
  sleep 0.1
done
admin="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$work/data/addresses.json")"
proxy="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["proxy"])' "$work/data/addresses.json")"
token="$(cat "$work/data/admin.token")"
auth=(-H "Authorization: Bearer $token")

# Records for the id-taking operations: an open run with a staged effect, a sealed run.
run="$(curl -sS --fail --noproxy '*' "${auth[@]}" -X POST "$admin/v1/runs")"
run_id="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$run")"
run_token="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$run")"
curl -sS --noproxy '' -o /dev/null -x "http://$run_id:$run_token@$proxy" \
  -X POST -H 'content-type: application/json' -d '{"n":1}' http://127.0.0.1:9/hook
sealed="$(curl -sS --fail --noproxy '*' "${auth[@]}" -X POST "$admin/v1/runs")"
sealed_id="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$sealed")"
curl -sS --fail --noproxy '*' "${auth[@]}" -o /dev/null -X POST "$admin/v1/runs/$sealed_id/seal"

status=0
timeout 300 "$schemathesis" run "$admin/v1/openapi.json" \
  --url "$admin" \
  "${auth[@]}" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --exclude-path-regex '/workspace|/savepoints|/rollback-to' \
  --max-examples "$max_examples" \
  --request-timeout 30 \
  --seed 1 \
  --no-color || status=$?
if [ "$status" -ne 0 ]; then
  echo "schemathesis failed ($status); airlock's log:" >&2
  tail -n 50 "$work/airlock.log" >&2
fi
exit "$status"
