#!/usr/bin/env bash
# memseal.watch on a Python training loop in instructions and in estimated cycles, which the
# machine's noise does not move: cachegrind, with its cache simulation, runs each mode of
# bench/python/watch_instructions.py at 100 and at 600 steps; the difference over 500 steps is the
# loop's steady cost per step in that mode (start-up and `import torch`, the same in both, cancel
# out). Estimated cycles add what the instruction count leaves out, the cache misses, with the
# weights iai and pythonspeed.com's "consistent benchmarking in CI" use:
#   L1 hits + 5 x last-level hits + 35 x memory accesses.
# A mode's two runs go at once and take about six minutes on two cores.
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
count() {  # MODE STEPS: the run's event totals (Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw) into $work/MODE.STEPS
  PYTHONHASHSEED=0 OMP_NUM_THREADS=1 valgrind --tool=cachegrind --cache-sim=yes \
    --cachegrind-out-file="$work/$1.$2.out" "$MEMSEAL_PYTHON" "$script" "$1" "$2" >"$work/$1.$2.log" 2>&1 ||
    { echo "instruction_counts.sh: $1 $2 failed:" >&2; tail -5 "$work/$1.$2.log" >&2; return 1; }
  awk '/^summary:/ {print $2, $3, $4, $5, $6, $7, $8, $9, $10}' "$work/$1.$2.out" >"$work/$1.$2"
}
per_step() {  # MODE: "Ir/step estimated-cycles/step"
  paste -d' ' "$work/$1.$small" "$work/$1.$large" | awk -v steps=$((large - small)) '{
    for (i = 1; i <= 9; i++) d[i] = ($(i + 9) - $i) / steps
    ir = d[1]; l1_misses = d[2] + d[5] + d[8]; memory = d[3] + d[6] + d[9]
    if (memory < 0) memory = 0  # the two runs differ by a few misses in start-up: noise, not cost
    accesses = d[1] + d[4] + d[7]
    printf "%.0f %.0f\n", ir, (accesses - l1_misses) + 5 * (l1_misses - memory) + 35 * memory }'
}
printf "%-12s %12s %8s %14s %8s\n" mode "Ir/step" "" "est. cycles" ""
for mode in "${modes[@]}"; do
  count "$mode" "$small" & first=$!
  count "$mode" "$large" & second=$!
  wait "$first"; wait "$second"
  per_step "$mode" >"$work/$mode.per_step"
  read -r ir cycles <"$work/$mode.per_step"
  if [ "$mode" = plain ]; then
    printf "%-12s %12.0f %8s %14.0f\n" "$mode" "$ir" "" "$cycles"
  else
    read -r plain_ir plain_cycles <"$work/plain.per_step"
    printf "%-12s %12.0f %7.3fx %14.0f %7.3fx\n" "$mode" "$ir" "$(echo "$ir / $plain_ir" | bc -l)" \
      "$cycles" "$(echo "$cycles / $plain_cycles" | bc -l)"
  fi
done
