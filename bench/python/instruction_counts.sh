#!/usr/bin/env bash
# memseal.watch on a Python training loop in instructions (callgrind), which the machine's noise
# does not move: Ir of 600 steps minus Ir of 100 steps, per step, for each mode of
# bench/python/watch_instructions.py, and each mode's ratio to the plain loop. Both counts are past
# warm-up and the watched start (start-up and `import torch`, the same in both, cancel out). A
# mode's two runs go at once and take about six minutes under callgrind on two cores.
# Usage: bench/python/instruction_counts.sh [MODE ...]   (default: plain frames-off default)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
script="$MEMSEAL_ROOT/bench/python/watch_instructions.py"
modes=(plain)  # first: the others are its ratios
for mode in "${@:-frames-off default}"; do
  for word in $mode; do
    case "$word" in
      plain) ;;
      hooks | default | stacks-on | frames-off) modes+=("$word") ;;
      *) echo "instruction_counts.sh: no mode '$word' (hooks, default, stacks-on, frames-off)" >&2; exit 2 ;;
    esac
  done
done
command -v valgrind >/dev/null || { echo "instruction_counts.sh: valgrind is not installed" >&2; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
small=100 large=600
count() {  # MODE STEPS: the run's total Ir into $work/MODE.STEPS
  PYTHONHASHSEED=0 OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$work/$1.$2.out" \
    "$MEMSEAL_PYTHON" "$script" "$1" "$2" >"$work/$1.$2.log" 2>&1 ||
    { echo "instruction_counts.sh: $1 $2 failed:" >&2; tail -5 "$work/$1.$2.log" >&2; return 1; }
  callgrind_annotate "$work/$1.$2.out" 2>/dev/null |
    awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' >"$work/$1.$2"
}
for mode in "${modes[@]}"; do
  count "$mode" "$small" & first=$!
  count "$mode" "$large" & second=$!
  wait "$first"; wait "$second"
  per_step="$(echo "($(cat "$work/$mode.$large") - $(cat "$work/$mode.$small")) / ($large - $small)" | bc -l)"
  echo "$per_step" >"$work/$mode.per_step"
  if [ "$mode" = plain ]; then
    printf "%-12s %12.0f Ir/step\n" "$mode" "$per_step"
  else
    printf "%-12s %12.0f Ir/step  %6.3fx\n" "$mode" "$per_step" \
      "$(echo "$per_step / $(cat "$work/plain.per_step")" | bc -l)"
  fi
done
