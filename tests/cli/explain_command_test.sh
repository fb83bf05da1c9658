#!/usr/bin/env bash
# `memseal explain`, `memseal fit` and the report files of `memseal check` as a user runs them:
# the breakdown, the capacity prediction, every bad input with its message and exit code, the HTML
# page opened in headless Chromium (skipped where there is none), and the memory_viz trace read by
# torch's own readers with totals equal to the tracker's.
# Usage: explain_command_test.sh MEMSEAL CASES_DIR PYTHON
set -uo pipefail
memseal="$1"; cases="$2"; python="$3"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
source "$(cd "$(dirname "$0")/.." && pwd)/expect.sh"
browser() { "$python" "$here/../report/html_browser_check.py" "$@"; }

# explain: the training case names its model and Adam; every role is there, parameters exactly.
expect explain-training 0 "optimizer_state +[0-9.]+ MiB" -- \
  "$memseal" explain --json "$work/explain.json" --html "$work/explain.html" "$cases/training_case.so"
expect explain-json 0 "" -- "$python" -c "
import json; d = json.load(open('$work/explain.json'))
assert d['schema'] == 'memseal.explain/1', d['schema']
roles = {r['role']: r['bytes'] for r in d['roles']}
assert list(roles) == ['parameters', 'gradients', 'optimizer_state', 'activations', 'temporaries', 'other'], roles
params = (512*1024 + 1024) + (1024*1024 + 1024) + (1024*10 + 10)
assert roles['parameters'] == 4 * params, (roles, 4 * params)
assert roles['optimizer_state'] == 2 * 4 * params, roles
assert sum(roles.values()) == d['peak_bytes']
assert d['identified'] == {'model': True, 'optimizer': True}"
expect explain-html-in-browser 0 "" -- browser --html "$work/explain.html" \
  --expect-chart roles-chart peak-timeline-chart --screenshot "$work/explain.png"
expect explain-missing-file 2 "no such file" -- "$memseal" explain "$work/missing.so"
expect explain-no-step 2 "does not export .extern \"C\" void step\(int\)" -- \
  "$memseal" explain "$cases/sized_mlp_case.so"
expect explain-too-few-steps 2 "must exceed --warmup" -- \
  "$memseal" explain --steps 2 --warmup 2 "$cases/training_case.so"
expect explain-json-into-directory 2 "is a directory" -- \
  "$memseal" explain --json "$work" "$cases/training_case.so"
expect explain-html-no-folder 2 "no folder" -- \
  "$memseal" explain --html "$work/nowhere/x.html" "$cases/training_case.so"
expect explain-bad-stacks 2 "expected off, on, python or sample:N" -- \
  "$memseal" explain --stacks sometimes "$cases/training_case.so"

# fit: linear in the batch (where activations, not gradients, make the peak); a budget gives the
# largest batch, --verify measures it.
expect fit-linear 0 "model: phases" -- "$memseal" fit --sizes 512,1024,1536,2048 --budget 64MiB \
  --verify --json "$work/fit.json" --html "$work/fit.html" "$cases/sized_mlp_case.so"
expect fit-json 0 "" -- "$python" -c "
import json; d = json.load(open('$work/fit.json'))
assert d['schema'] == 'memseal.fit/2' and d['model'] == 'phases' and d['is_linear'], d
assert d['points'][0]['phases']['forward'] > 0 and d['limiting_phase'].startswith('backward:'), d
assert d['largest_size'] == d['predicted_max_size'] and not d['largest_size_measured'], d
assert d['budget_bytes'] == 64 << 20 and d['budget_source'] == '--budget', d
assert d['predicted_max_size'] > 2048 and d['verify']['size'] == d['predicted_max_size'], d
assert abs(d['verify']['relative_error']) < 0.05 and d['verify']['within_budget'], d['verify']"
expect fit-html-in-browser 0 "" -- browser --html "$work/fit.html" --expect-chart fit-chart
expect fit-quadratic-is-not-linear 0 "model: quadratic" -- \
  "$memseal" fit --sizes 64,128,256,512 --budget 1GiB "$cases/sized_attention_case.so"
expect fit-three-curved-points-refused 1 "no prediction: .*measure a fourth size" -- \
  "$memseal" fit --sizes 128,256,512 --budget 1GiB "$cases/sized_attention_case.so"
# Where the peak's moment moves with the batch (a weight's gradient at small ones, activations at
# large ones), each phase is fitted apart and the prediction holds where it is measured.
expect fit-bend-followed 0 "the peak is in .*, then in backward" -- \
  "$memseal" fit --sizes 64,128,192,256 --budget 64MiB --verify --json "$work/bend.json" \
  "$cases/sized_mlp_case.so"
expect fit-bend-json 0 "" -- "$python" -c "
import json; d = json.load(open('$work/bend.json'))
assert not d['is_linear'] and d['model'] == 'phases', d['model']
v = d['verify']
assert abs(v['relative_error']) < 0.03 and v['within_budget'] and not v['missed'], v"
expect fit-extrapolation-said 0 "extrapolated: [0-9.]+x the largest measured size \(256\)" -- \
  "$memseal" fit --sizes 64,128,192,256 --budget 64MiB "$cases/sized_mlp_case.so"
expect fit-budget-from-memory 0 "available memory" -- \
  "$memseal" fit --sizes 1024,2048,3072 "$cases/sized_mlp_case.so"
expect fit-two-sizes 2 "at least three sizes" -- "$memseal" fit --sizes 1,2 "$cases/sized_mlp_case.so"
expect fit-bad-sizes 2 "--sizes 'a,b,c': expected positive integers" -- \
  "$memseal" fit --sizes a,b,c "$cases/sized_mlp_case.so"
expect fit-repeated-size 2 "appears twice" -- "$memseal" fit --sizes 1,2,2 "$cases/sized_mlp_case.so"
expect fit-bad-budget 2 "--budget 'lots': expected a positive size" -- \
  "$memseal" fit --budget lots "$cases/sized_mlp_case.so"
expect fit-bad-margin 2 "--margin 2: expected a fraction" -- \
  "$memseal" fit --margin 2 "$cases/sized_mlp_case.so"
expect fit-bad-memory 2 "--memory 'gpu': expected host, cuda or cuda:N" -- \
  "$memseal" fit --memory gpu "$cases/sized_mlp_case.so"
expect fit-memory-unused-device 2 "reserved no memory on cuda:3" -- \
  "$memseal" fit --memory cuda:3 --budget 1GiB "$cases/sized_mlp_case.so"
expect fit-no-sized-step 2 "does not export .extern \"C\" void sized_step" -- \
  "$memseal" fit "$cases/training_case.so"

# check --html: the verdict, one card per finding and the timeline, in a browser.
expect check-html 1 "LEAK" -- "$memseal" check --steps 12 --warmup 3 --json "$work/leak.json" \
  --html "$work/leak.html" "$cases/leaky_loss_case.so"
cards="$("$python" -c "import json; print(len(json.load(open('$work/leak.json'))['findings']))")"
expect check-html-in-browser 0 "" -- browser --html "$work/leak.html" --expect-verdict leak \
  --expect-cards "$cards" --expect-chart timeline-chart --expect-title "leaky_loss_case.so" \
  --screenshot "$work/leak.png"
expect check-html-healthy 0 "no leak" -- "$memseal" check --steps 12 --warmup 3 \
  --html "$work/healthy.html" "$cases/healthy_case.so"
expect check-html-healthy-in-browser 0 "" -- browser --html "$work/healthy.html" \
  --expect-verdict no_leak --expect-cards 0
# Markup in a scope name is shown, never run.
expect check-html-hostile 1 "" -- "$memseal" check --steps 12 --warmup 3 --html "$work/hostile.html" \
  "$cases/hostile_names_case.so"
expect check-html-hostile-escaped 0 "" -- grep -q "&lt;script&gt;document.title" "$work/hostile.html"
expect check-html-hostile-in-browser 0 "" -- browser --html "$work/hostile.html" \
  --expect-verdict leak --expect-title "hostile_names_case.so"
expect check-html-into-directory 2 "is a directory" -- "$memseal" check --html "$work" "$cases/healthy_case.so"

# check --memory-viz: torch's readers accept the pickle, with the totals memseal printed (the C++
# test MemoryTrace.CountsEveryAllocationAndFreeOfATrackedLoop holds those to the tracker's counts);
# a healthy case stays healthy with the trace's ring in the process.
expect check-memory-viz 1 "memory_viz trace: [0-9]+ allocations" -- "$memseal" check --steps 10 \
  --warmup 3 --memory-viz "$work/trace.pickle" "$cases/leaky_loss_case.so"
read -r allocs frees live <<<"$(sed -nE 's/.*memory_viz trace: ([0-9]+) allocations, ([0-9]+) frees, ([0-9]+) bytes live.*/\1 \2 \3/p' "$work/out")"
expect memory-viz-read-by-torch 0 "memory_viz check passed" -- "$python" "$here/../report/memory_viz_check.py" \
  "$work/trace.pickle" --expect-allocs "${allocs:-0}" --expect-frees "${frees:-0}" --expect-live-bytes "${live:-0}" \
  --expect-frame "aten::"
expect memory-viz-healthy-stays-healthy 0 "no leak" -- "$memseal" check --steps 15 --warmup 3 \
  --memory-viz "$work/healthy.pickle" --memory-viz-events 400000 "$cases/healthy_case.so"
expect memory-viz-into-directory 2 "is a directory" -- \
  "$memseal" check --memory-viz "$work" "$cases/healthy_case.so"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
