#!/usr/bin/env bash
# Instructions per CUDA caching-allocator event on memseal's device path (the trace hook's entry
# point, the device block's live record, the ledger) and per step boundary, counted by callgrind
# on a synthetic training step (bench/device_events.cpp), so no GPU is needed: Ir of 300 steps
# minus Ir of 100 steps, per step, then per event. With MEMSEAL_BENCH_DETECTOR=1 in the
# environment the default leak detector's step() closes each step instead of a bare step boundary.
# Usage: [MEMSEAL_BENCH_DETECTOR=1] bench/device_event_cost.sh BUILD_DIR [PER_STEP [LONG_LIVED]]
set -euo pipefail
build="${1:-build/release}"
per_step="${2:-287}"
long_lived="${3:-500}"
binary="$build/bench/memseal_bench_device_events"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
total() {
  valgrind --tool=callgrind --callgrind-out-file="$work/out" "$binary" "$1" "$per_step" \
    "$long_lived" >/dev/null 2>&1
  callgrind_annotate "$work/out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
small="$(total 100)"
large="$(total 300)"
per_step_ir="$(echo "($large - $small) / 200" | bc -l)"
printf "%d blocks per step (%d events), %d long-lived: %.0f Ir/step, %.1f Ir/event\n" \
  "$per_step" "$((per_step * 3))" "$long_lived" "$per_step_ir" \
  "$(echo "$per_step_ir / ($per_step * 3)" | bc -l)"
