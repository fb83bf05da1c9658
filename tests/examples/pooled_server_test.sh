#!/usr/bin/env bash
# The example server as a user runs it: pools + staging + arena make no allocation in steady state
# at 1 and 2 workers, the leak detector watching it finds nothing, and finds leases kept across
# requests naming the pool class; plain mode serves the same responses; bad flags exit 2.
# Usage: pooled_server_test.sh POOLED_SERVER
set -uo pipefail
server="$1"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
source "$(cd "$(dirname "$0")/.." && pwd)/expect.sh"

expect one-worker-allocates-nothing 0 "steady-state allocations: 0" -- \
  "$server" --workers 1 --requests 400
expect two-workers-allocate-nothing 0 "steady-state allocations: 0" -- \
  "$server" --workers 2 --requests 400
expect watched-healthy-server-has-no-leak 0 "leak: none in [0-9]+ steps" -- \
  "$server" --workers 2 --requests 600 --watch 1
expect kept-leases-are-a-leak 3 "made by +memseal::TensorPool lease 'input'" -- \
  "$server" --workers 1 --requests 600 --watch 1 --leak lease --on-exhausted grow
expect kept-leases-are-tensors-retained 0 "tensors-retained" -- cat "$work/last"
expect kept-leases-hint-names-the-class 0 "Leases of pool class 'input'" -- cat "$work/last"
expect kept-leases-exhaust-a-failing-pool 1 "TensorPool class 'input' is exhausted" -- \
  "$server" --workers 1 --requests 200 --leak lease --on-exhausted fail
# The same requests served with plain per-request tensors give the same responses.
"$server" --workers 1 --requests 300 | grep checksum >"$work/pooled"
"$server" --workers 1 --requests 300 --mode plain | grep checksum >"$work/plain"
expect plain-mode-gives-the-same-responses 0 "" -- diff "$work/pooled" "$work/plain"
expect bad-flag-exits-2 2 "bad flag or value: --workers 0" -- "$server" --workers 0
expect missing-value-exits-2 2 "--mode needs a value" -- "$server" --mode

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
