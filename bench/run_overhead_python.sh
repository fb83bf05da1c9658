#!/usr/bin/env bash
# A Python training script run unmodified: plain, under `memseal run` with its defaults, under
# heaptrack, `memray run` and `memray run --native`, interleaved in one run: REPEATS rounds of the
# five, each the loop's own wall time (the script measures it, start-up excluded). Prints each round
# and the median ratios to plain. memray goes to ${MEMSEAL_CACHE}/bench-packages, once, not into
# the venv.
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
declare -A times
modes=(plain memseal-run heaptrack memray memray-native)
for round in $(seq "$repeats"); do
  for mode in "${modes[@]}"; do
    rm -f "$work/memray.bin"
    case $mode in
      plain) "$MEMSEAL_PYTHON" "$script" "$steps" 2> "$work/err" ;;
      memseal-run) "$memseal" run -- "$MEMSEAL_PYTHON" "$script" "$steps" 2> "$work/err" ;;
      heaptrack) heaptrack -o "$work/heaptrack" "$MEMSEAL_PYTHON" "$script" "$steps" \
                   > "$work/out" 2> "$work/err"
                 cat "$work/out" >> "$work/err" ;;
      memray) PYTHONPATH="$packages" "$MEMSEAL_PYTHON" -m memray run -q -o "$work/memray.bin" \
                "$script" "$steps" 2> "$work/err" ;;
      memray-native) PYTHONPATH="$packages" "$MEMSEAL_PYTHON" -m memray run --native -q \
                       -o "$work/memray.bin" "$script" "$steps" 2> "$work/err" ;;
    esac
    ms=$(loop_ms "$work/err")
    [ -n "$ms" ] || { echo "run_overhead_python: $mode printed no loop time:" >&2; cat "$work/err" >&2; exit 1; }
    times[$mode]+="$ms "
    echo "round $round $mode ${ms} ms"
  done
done
python3 - "${times[plain]}" "${times[memseal-run]}" "${times[heaptrack]}" "${times[memray]}" \
  "${times[memray-native]}" <<'PY'
import statistics, sys
plain, *others = ([float(x) for x in arg.split()] for arg in sys.argv[1:])
names = ("memseal run (defaults)", "heaptrack", "memray run", "memray run --native")
for name, values in zip(names, others):
    ratios = [v / p for v, p in zip(values, plain)]
    print(f"{name:24s} median {statistics.median(ratios):.2f}x  (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
print(f"plain training loop median {statistics.median(plain):.0f} ms")
PY
