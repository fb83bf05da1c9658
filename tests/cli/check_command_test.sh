#!/usr/bin/env bash
# `memseal check` as a user runs it: exit codes 0/1/2, the report, the JSON file, options from the
# command line and the environment, clear messages for every bad input; `memseal report` reading
# saved reports back; and `memseal plan` when a Python with torch is given.
# Usage: check_command_test.sh MEMSEAL CASES_DIR [PYTHON]
set -uo pipefail
memseal="$1"; cases="$2"; python="${3:-}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
source "$(cd "$(dirname "$0")/.." && pwd)/expect.sh"

expect leak-exits-1 1 "autograd-graph-retained" -- \
  "$memseal" check --steps 15 --warmup 3 --json "$work/leak.json" "$cases/leaky_loss_case.so"
expect json-written 0 '"verdict": "leak"' -- cat "$work/leak.json"
expect json-schema 0 '"schema": "memseal.check/1"' -- cat "$work/leak.json"
expect json-is-valid 0 "" -- python3 -c "import json,sys; d=json.load(open('$work/leak.json')); \
assert d['findings'][0]['category']=='autograd-graph-retained'; assert len(d['live_bytes'])==15"
# Source paths as the compiler recorded them (build/release/../../examples/...) print normalised:
# absolute where the working directory is elsewhere, relative when the file lies under it; the JSON
# keeps the recorded path (`file`) beside the shown one (`shown_file`). (Where ccache served the
# objects, the recorded path is the folder that first compiled them.)
expect paths-from-elsewhere 1 "autograd-graph-retained" -- bash -c \
  'cd "$0" && "$1" check --steps 15 --warmup 3 --json "$2" "$3"' \
  "$work" "$memseal" "$work/paths.json" "$cases/leaky_loss_case.so"
expect paths-normal-and-absolute 0 "" -- python3 -c "import json; d=json.load(open('$work/paths.json')); \
files=[(f['file'], f['shown_file']) for x in d['findings'] for f in x['frames'] if f['file']]; \
assert files and not any('/../' in a or '/./' in a or '/../' in b for a, b in files), files; \
own=[f for f in files if f[0].endswith('/leaky_loss_case.cpp')]; \
assert own and own[0][0].startswith('/') and own[0][1] == own[0][0], own"
source_dir="$(python3 -c "import json, os; d=json.load(open('$work/paths.json')); \
print(next(os.path.dirname(f['file']) for x in d['findings'] for f in x['frames'] \
if f['file'].endswith('/leaky_loss_case.cpp')))" 2>/dev/null)"
if [ -n "$source_dir" ] && [ -d "$source_dir" ]; then
  expect paths-relative-under-cwd 1 " leaky_loss_case\.cpp:[0-9]" -- bash -c \
    'cd "$0" && "$1" check --steps 15 --warmup 3 "$2"' "$source_dir" "$memseal" \
    "$cases/leaky_loss_case.so"
else
  echo "skip paths-relative-under-cwd: the recorded source folder ($source_dir) is not here"
fi
expect healthy-exits-0 0 "no leak" -- "$memseal" check --steps 15 --warmup 3 "$cases/healthy_case.so"
expect quiet-healthy-prints-nothing 0 "" -- bash -c \
  'out="$("$0" check --quiet --steps 12 --warmup 3 "$1")" && [ -z "$out" ]' "$memseal" "$cases/healthy_case.so"
expect missing-file 2 "no such file" -- "$memseal" check "$work/missing.so"
echo "not a library" > "$work/text.so"
expect not-elf 2 "not a shared library" -- "$memseal" check "$work/text.so"
expect directory 2 "is a directory" -- "$memseal" check "$work"
echo 'def step(i): pass' > "$work/case.py"
expect python-file-names-the-package 2 "Python files are run by the memseal command of memseal's Python package" -- \
  "$memseal" check "$work/case.py"
expect no-step 2 "does not export .extern \"C\" void step\(int\)" -- "$memseal" check "$cases/no_step_case.so"
expect too-few-steps 2 "must exceed --warmup" -- "$memseal" check --steps 5 --warmup 3 "$cases/healthy_case.so"
expect ops-one-step-in-4 1 "autograd-graph-retained" -- \
  "$memseal" check --steps 30 --warmup 3 --watch-ops every:4 "$cases/leaky_loss_case.so"
expect bad-watch-ops 2 "--watch-ops: 'every:0': expected all, off, every:N or auto" -- \
  "$memseal" check --watch-ops every:0 "$cases/healthy_case.so"
# The flag's former name is still taken (deprecated), and so is its variable's.
expect former-observe-ops 0 "no leak" -- \
  "$memseal" check --steps 12 --warmup 3 --observe-ops off "$cases/healthy_case.so"
expect former-observe-ops-env 2 "MEMSEAL_OBSERVE_OPS=sometimes: expected all, off, every:N or auto" -- \
  env MEMSEAL_OBSERVE_OPS=sometimes "$memseal" check "$cases/healthy_case.so"
expect bad-stacks 2 "--stacks: 'sometimes': expected off, on, python or sample:N" -- \
  "$memseal" check --stacks sometimes "$cases/healthy_case.so"
expect bad-tensor-metadata 2 "expected on, off, 1 or 0" -- \
  "$memseal" check --tensor-metadata maybe "$cases/healthy_case.so"
# One grammar: what the environment accepts, the command line accepts (ops off, stacks sampled).
expect ops-off-is-a-value 0 "no leak" -- \
  "$memseal" check --steps 12 --warmup 3 --watch-ops off "$cases/healthy_case.so"
expect ops-auto 1 "autograd-graph-retained" -- \
  "$memseal" check --steps 15 --warmup 3 --watch-ops auto "$cases/leaky_loss_case.so"
# The environment is honoured where the command line says nothing...
expect env-stacks-off 1 "autograd-graph-retained" -- env MEMSEAL_STACKS=off \
  "$memseal" check --steps 15 --warmup 3 --json "$work/nostacks.json" "$cases/leaky_loss_case.so"
expect env-stacks-off-means-no-frames 0 "" -- python3 -c "import json; d=json.load(open('$work/nostacks.json')); \
assert all(f['frames']==[] for f in d['findings']), d['findings'][0]['frames']"
# ... and the command line wins over it.
expect flag-beats-env 1 "autograd-graph-retained" -- env MEMSEAL_STACKS=off \
  "$memseal" check --stacks on --steps 15 --warmup 3 --json "$work/stacks.json" "$cases/leaky_loss_case.so"
expect flag-beats-env-frames 0 "" -- python3 -c "import json; d=json.load(open('$work/stacks.json')); \
assert any(f['frames'] for f in d['findings'])"
expect bad-env 2 "MEMSEAL_WATCH_OPS=sometimes: expected all, off, every:N or auto" -- \
  env MEMSEAL_WATCH_OPS=sometimes "$memseal" check "$cases/healthy_case.so"
expect json-into-directory 2 "is a directory" -- "$memseal" check --json "$work" "$cases/healthy_case.so"
expect no-subcommand 2 "subcommand" -- "$memseal"
expect unknown-option 2 "" -- "$memseal" check --frobnicate "$cases/healthy_case.so"
# `memseal report`: a saved report printed again, its verdict as the exit code.
"$memseal" check --steps 15 --warmup 3 --json "$work/again.json" "$cases/leaky_loss_case.so" \
  > "$work/printed.txt" 2>/dev/null
expect report-leak-exits-1 1 "autograd-graph-retained" -- "$memseal" report "$work/again.json"
expect report-same-text 0 "" -- bash -c 'diff <("$0" report "$1") "$2"' \
  "$memseal" "$work/again.json" "$work/printed.txt"
"$memseal" check --steps 12 --warmup 3 --json "$work/healthy.json" "$cases/healthy_case.so" >/dev/null
expect report-healthy-exits-0 0 "no leak" -- "$memseal" report "$work/healthy.json"
expect json-schema-first 0 "" -- python3 -c "import json; d=json.load(open('$work/healthy.json')); \
assert list(d)[0]=='schema', list(d)"
sed 's#"memseal.check/1"#"memseal.check/2"#' "$work/healthy.json" > "$work/newer.json"
expect report-newer-version 2 "newer memseal \(memseal.check/2\); this memseal reads memseal.check/1" -- \
  "$memseal" report "$work/newer.json"
sed 's#"memseal.check/1"#"memseal.plan/1"#' "$work/healthy.json" > "$work/other.json"
expect report-other-schema 2 "schema is memseal.plan/1; this memseal reads memseal.check/1" -- \
  "$memseal" report "$work/other.json"
head -c 200 "$work/healthy.json" > "$work/truncated.json"
expect report-malformed 2 "not valid JSON" -- "$memseal" report "$work/truncated.json"
echo '{"verdict": "leak"}' > "$work/noschema.json"
expect report-no-schema 2 "no \"schema\"" -- "$memseal" report "$work/noschema.json"
python3 -c "import json; d=json.load(open('$work/again.json')); del d['findings'][0]['category']; \
json.dump(d, open('$work/nocategory.json','w'))"
expect report-missing-field 2 "findings\[0\] has no \"category\"" -- "$memseal" report "$work/nocategory.json"
expect report-missing-file 2 "" -- "$memseal" report "$work/none.json"
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
