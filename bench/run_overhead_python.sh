#!/usr/bin/env bash
# A Python training script run unmodified: plain, under `memseal run` with its defaults, under
# heaptrack, `memray run` and `memray run --native`, interleaved in one run: REPEATS rounds of the
# five, each the loop's own wall time (the script measures it, start-up excluded), in 40 blocks.
# Prints each round and, for each of the four, three ratios to plain (bench/block_ratios.py): the
# whole loop's, the fastest block's of the loop's second half, and the loop's put together from
# each block's fastest round. memray goes to ${MEMSEAL_CACHE}/bench-packages, once, not into the
# venv.
#   bench/run_overhead_python.sh [BUILD_DIR] [REPEATS] [STEPS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
build=${1:-build/release}
repeats=${2:-5}
steps=${3:-3000}
memseal="$build/memseal"
script="$MEMSEAL_ROOT/bench/python/timed_training.py"
command -v heaptrack > /dev/null || { echo "run_overhead_python: heaptrack not found (apt install heaptrack)" >&2; exit 2; }
packages="$MEMSEAL_CACHE/bench-packages"
if [ ! -d "$packages/memray" ]; then
  "$MEMSEAL_PYTHON" -m pip install -q --disable-pip-version-check --target "$packages" memray
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
loop_ms() { sed -n 's/^training loop: [0-9]* steps in \([0-9.]*\) ms$/\1/p' "$1" | tail -1; }
modes=(plain memseal-run heaptrack memray memray-native)
block=$(( steps / 40 > 0 ? steps / 40 : 1 ))
mkdir "$work/runs"
run=0
for round in $(seq "$repeats"); do
  for mode in "${modes[@]}"; do
    rm -f "$work/memray.bin"
    run=$((run + 1))
    err="$work/runs/$(printf %04d "$run")-$mode.err"
    args=("$script" "$steps" "$block")
    case $mode in
      plain) "$MEMSEAL_PYTHON" "${args[@]}" 2> "$err" ;;
      memseal-run) "$memseal" run -- "$MEMSEAL_PYTHON" "${args[@]}" 2> "$err" ;;
      heaptrack) heaptrack -o "$work/heaptrack" "$MEMSEAL_PYTHON" "${args[@]}" \
                   > "$work/out" 2> "$err"
                 cat "$work/out" >> "$err" ;;
      memray) PYTHONPATH="$packages" "$MEMSEAL_PYTHON" -m memray run -q -o "$work/memray.bin" \
                "${args[@]}" 2> "$err" ;;
      memray-native) PYTHONPATH="$packages" "$MEMSEAL_PYTHON" -m memray run --native -q \
                       -o "$work/memray.bin" "${args[@]}" 2> "$err" ;;
    esac
    ms=$(loop_ms "$err")
    [ -n "$ms" ] || { echo "run_overhead_python: $mode printed no loop time:" >&2; cat "$err" >&2; exit 1; }
    echo "round $round $mode ${ms} ms"
  done
done
python3 "$(dirname "${BASH_SOURCE[0]}")/block_ratios.py" "$work/runs" \
  "memseal-run=memseal run (defaults)" "heaptrack=heaptrack" "memray=memray run" \
  "memray-native=memray run --native"
