#!/usr/bin/env bash
# `memseal diff` and `--baseline` as a user runs them: two runs of one case compared (no change),
# a leak cause that appears, a peak that grows past the tolerance, a fit whose largest size moves,
# every bad input with its message and exit code, and the page in headless Chromium (skipped where
# there is none).
# Usage: diff_command_test.sh MEMSEAL CASES_DIR PYTHON
set -uo pipefail
memseal="$1"; cases="$2"; python="$3"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
source "$(cd "$(dirname "$0")/.." && pwd)/expect.sh"
cd "$work"

# Two runs of one training step: the same peak to the byte, so no change, exit 0.
expect explain-first 0 "" -- "$memseal" explain --json a.json "$cases/training_case.so"
expect explain-second 0 "" -- "$memseal" explain --json b.json "$cases/training_case.so"
expect diff-same-runs 0 "no change beyond the noise" -- "$memseal" diff a.json b.json --json d.json
expect diff-json 0 "" -- "$python" -c "
import json; d = json.load(open('d.json'))
assert list(d)[0] == 'schema' and d['schema'] == 'memseal.diff/1', d['schema']
assert d['kind'] == 'explain' and d['empty'] and d['peak_change'] == 0, d
assert all(not b['entries'] for b in d['breakdowns']), d['breakdowns']"

# A run whose optimizer state doubled (the report edited as a wider layer would change it): the
# optimizer state is the largest line and the roles add up to the change; exit 1.
expect widen 0 "" -- "$python" -c "
import json; d = json.load(open('a.json'))
extra = next(r['bytes'] for r in d['roles'] if r['role'] == 'optimizer_state')
for r in d['roles']:
    if r['role'] == 'optimizer_state': r['bytes'] += extra
d['peak_bytes'] += extra
json.dump(d, open('wider.json', 'w'))"
expect diff-wider 1 "by role.*" -- "$memseal" diff a.json wider.json --json dw.json --html dw.html
expect diff-wider-largest-first 0 "" -- "$python" -c "
import json; d = json.load(open('dw.json'))
roles = next(b for b in d['breakdowns'] if b['dimension'] == 'role')['entries']
assert roles[0]['key'] == 'optimizer_state', roles
assert sum(e['change'] for e in roles) == d['peak_change'] > 0, (roles, d['peak_change'])"
expect diff-html-in-browser 0 "" -- "$python" "$here/../report/html_browser_check.py" \
  --html dw.html --expect-chart diff-timeline-chart --screenshot "$work/diff.png"

# Baselines: the first run writes one, the next is held to it; a grown peak fails with the diff.
expect baseline-written 0 "baseline: written to base.json" -- \
  "$memseal" explain --baseline base.json "$cases/training_case.so"
expect baseline-held 0 "memseal baseline: peak .* no new leak cause: ok" -- \
  "$memseal" explain --baseline base.json --tolerance 5% "$cases/training_case.so"
expect baseline-shrunk 0 "" -- "$python" -c "
import json; d = json.load(open('base.json'))
for r in d['roles']:
    if r['role'] == 'optimizer_state': cut = r['bytes'] // 2; r['bytes'] -= cut
d['peak_bytes'] -= cut
json.dump(d, open('small.json', 'w'))"
expect baseline-over 1 "the peak grew from .* more than the 1.0% tolerance" -- \
  "$memseal" explain --baseline small.json --tolerance 0.01 "$cases/training_case.so"
expect baseline-update 0 "replacing the one there" -- \
  "$memseal" explain --baseline small.json --update-baseline "$cases/training_case.so"
expect baseline-check-written 0 "written to check.json" -- \
  "$memseal" check --quiet --baseline check.json "$cases/healthy_case.so"
expect baseline-new-leak-cause 1 "a leak cause the baseline did not have: autograd-graph-retained" -- \
  "$memseal" check --baseline check.json "$cases/leaky_loss_case.so"
expect baseline-other-kind 2 "two reports of one kind" -- \
  "$memseal" check --baseline base.json "$cases/healthy_case.so"
expect baseline-bad-tolerance 2 "is not a fraction such as 5% or 0.05" -- \
  "$memseal" explain --baseline base.json --tolerance lots "$cases/training_case.so"
expect baseline-into-directory 2 "is a directory" -- \
  "$memseal" explain --baseline "$work" "$cases/training_case.so"
expect update-without-baseline 2 "--update-baseline needs --baseline" -- \
  "$memseal" explain --update-baseline "$cases/training_case.so"

# Two fits of one case against two budgets: the largest size that fits moves.
expect fit-64 0 "" -- "$memseal" fit --sizes 512,1024,1536,2048 --budget 64MiB --json f64.json \
  "$cases/sized_mlp_case.so"
expect fit-32 0 "" -- "$memseal" fit --sizes 512,1024,1536,2048 --budget 32MiB --json f32.json \
  "$cases/sized_mlp_case.so"
expect diff-fits 1 "largest size that fits: [0-9]+ -> [0-9]+ \(budget 32.0 MiB\)" -- \
  "$memseal" diff f64.json f32.json

# What cannot be compared, or read.
expect diff-two-kinds 2 "is an explained peak .* and check.json a leak check .*two reports of one kind" -- \
  "$memseal" diff a.json check.json
expect diff-missing 2 "cannot read missing.json" -- "$memseal" diff a.json missing.json
printf 'not json' > bad.json
expect diff-not-json 2 "bad.json is not JSON" -- "$memseal" diff a.json bad.json
printf '{"schema": "memseal.explain/9"}' > newer.json
expect diff-newer 2 "newer than this memseal reads" -- "$memseal" diff a.json newer.json
expect diff-json-into-directory 2 "is a directory" -- "$memseal" diff a.json b.json --json "$work"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
