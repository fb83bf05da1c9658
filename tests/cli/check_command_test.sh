#!/usr/bin/env bash
# `memseal check` as a user runs it: exit codes 0/1/2, the report, the JSON file, and clear
# messages for every bad input; and `memseal plan` when a Python with torch is given.
# Usage: check_command_test.sh MEMSEAL CASES_DIR [PYTHON]
set -uo pipefail
memseal="$1"; cases="$2"; python="${3:-}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
passed=0; failed=0
expect() {  # expect NAME EXIT_CODE PATTERN -- command...
  local name="$1" want="$2" pattern="$3"; shift 4
  "$@" >"$work/out" 2>&1; local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $name: exit $got, wanted $want"; sed 's/^/    /' "$work/out" | head -20; failed=$((failed+1)); return
  fi
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" "$work/out"; then
    echo "FAIL $name: output lacks /$pattern/"; sed 's/^/    /' "$work/out" | head -20; failed=$((failed+1)); return
  fi
  echo "ok   $name"; passed=$((passed+1))
}

expect leak-exits-1 1 "autograd-graph-retained" -- \
  "$memseal" check --steps 15 --warmup 3 --json "$work/leak.json" "$cases/leaky_loss_case.so"
expect json-written 0 '"verdict": "leak"' -- cat "$work/leak.json"
expect json-schema 0 '"schema": "memseal.check/1"' -- cat "$work/leak.json"
expect json-is-valid 0 "" -- python3 -c "import json,sys; d=json.load(open('$work/leak.json')); \
assert d['findings'][0]['category']=='autograd-graph-retained'; assert len(d['live_bytes'])==15"
expect healthy-exits-0 0 "no leak" -- "$memseal" check --steps 15 --warmup 3 "$cases/healthy_case.so"
expect quiet-healthy-prints-nothing 0 "" -- bash -c \
  'out="$("$0" check --quiet --steps 12 --warmup 3 "$1")" && [ -z "$out" ]' "$memseal" "$cases/healthy_case.so"
expect missing-file 2 "no such file" -- "$memseal" check "$work/missing.so"
echo "not a library" > "$work/text.so"
expect not-elf 2 "not a shared library" -- "$memseal" check "$work/text.so"
expect directory 2 "is a directory" -- "$memseal" check "$work"
expect no-step 2 "does not export .extern \"C\" void step\(int\)" -- "$memseal" check "$cases/no_step_case.so"
expect too-few-steps 2 "must exceed --warmup" -- "$memseal" check --steps 5 --warmup 3 "$cases/healthy_case.so"
expect ops-one-step-in-4 1 "autograd-graph-retained" -- \
  "$memseal" check --steps 30 --warmup 3 --observe-ops every:4 "$cases/leaky_loss_case.so"
expect bad-observe-ops 2 "all or every:N" -- \
  "$memseal" check --observe-ops every:0 "$cases/healthy_case.so"
expect bad-stacks 2 "on, off or sample:N" -- "$memseal" check --stacks sometimes "$cases/healthy_case.so"
expect json-into-directory 2 "is a directory" -- "$memseal" check --json "$work" "$cases/healthy_case.so"
expect no-subcommand 2 "subcommand" -- "$memseal"
expect unknown-option 2 "" -- "$memseal" check --frobnicate "$cases/healthy_case.so"
expect version 0 "memseal [0-9]+\.[0-9]+\.[0-9]+ \(libtorch 2\.11" -- "$memseal" --version
expect help 0 "check" -- "$memseal" --help
if [ -n "$python" ]; then
  "$python" "$(dirname "$0")/../scripts/make_torchscript_model.py" "$work/model.pt"
  expect plan-sizes-each-batch 0 "\[8, 3, 64, 64\] +[0-9.]+ MiB +[0-9.]+ MiB +1\.[0-9]+x" -- \
    "$memseal" plan "$work/model.pt" --input 1x3x64x64 --batch 1,8
  expect plan-missing-model 2 "does not exist" -- "$memseal" plan "$work/none.pt" --input 1x3x8x8
  expect plan-bad-shape 2 "not a shape like" -- "$memseal" plan "$work/model.pt" --input 1xx3
  expect plan-not-torchscript 2 "cannot load .* as a TorchScript model" -- \
    "$memseal" plan "$work/text.so" --input 1x3x8x8
  expect plan-wrong-channels 2 "expected input.*to have 3 channels" -- \
    "$memseal" plan "$work/model.pt" --input 1x5x8x8
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
