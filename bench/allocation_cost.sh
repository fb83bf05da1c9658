#!/usr/bin/env bash
# Instructions per CPU allocation (allocate + free) on memseal's hot path, counted by callgrind,
# which the machine's noise does not move. Each mode runs with 100,000 and 200,000 allocations;
# (Ir(200k) - Ir(100k)) / 100k is the cost of one, start-up excluded.
# Then wall time of 2,000,000 allocations per thread on 1 and 2 threads, tracked against off, in
# alternating runs (medians of 7): shared atomics cost cycles that instruction counts do not show.
# Usage: bench/allocation_cost.sh BUILD_DIR [BINARY]
set -euo pipefail
build="${1:-build/release}"
binary="${2:-$build/bench/memseal_bench_allocation_cost}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
total() {  # total Ir of one run
  valgrind --tool=callgrind --callgrind-out-file="$work/out" "$binary" "$1" "$2" >/dev/null 2>&1
  callgrind_annotate "$work/out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
printf "%-10s %16s\n" mode "Ir/allocation"
for mode in off hook tracked; do
  small="$(total "$mode" 100000)"
  large="$(total "$mode" 200000)"
  printf "%-10s %16.1f\n" "$mode" "$(echo "($large - $small) / 100000" | bc -l)"
done

seconds() {  # wall seconds of one run
  local start end
  start=$(date +%s.%N); "$binary" "$@" >/dev/null 2>&1; end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "\n%-8s %12s %12s %8s\n" threads "off ms" "tracked ms" ratio
for threads in 1 2; do
  : > "$work/off"; : > "$work/tracked"
  for repetition in 1 2 3 4 5 6 7; do
    seconds off 2000000 "$threads" >> "$work/off"
    seconds tracked 2000000 "$threads" >> "$work/tracked"
  done
  off="$(median < "$work/off")"; tracked="$(median < "$work/tracked")"
  printf "%-8s %12.1f %12.1f %7.3fx\n" "$threads" "$(echo "$off * 1000" | bc -l)" \
         "$(echo "$tracked * 1000" | bc -l)" "$(echo "$tracked / $off" | bc -l)"
done
