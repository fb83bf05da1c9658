#!/usr/bin/env bash
# The default leak detector on loop (b) in instructions (callgrind), which the machine's noise does
# not move: Ir of 600 steps minus Ir of 200 steps, per step, plain and under the detector. Both
# counts are past warm-up and the detector's watched start, so this is its steady cost.
# Usage: bench/detector_instruction_counts.sh BUILD_DIR
set -euo pipefail
build="${1:-build/release}"
binary="$build/bench/memseal_bench_training_loop"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
total() {
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$work/out" "$binary" "$1" "$2" \
    >/dev/null 2>&1
  callgrind_annotate "$work/out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
declare -A per_step
for mode in off detector; do
  small="$(total "$mode" 200)"
  large="$(total "$mode" 600)"
  per_step[$mode]="$(echo "($large - $small) / 400" | bc -l)"
  printf "%-10s %14.0f Ir/step\n" "$mode" "${per_step[$mode]}"
done
printf "ratio      %14.3fx\n" "$(echo "${per_step[detector]} / ${per_step[off]}" | bc -l)"
