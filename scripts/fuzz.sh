#!/usr/bin/env bash
# memseal's fuzz targets (fuzz/: the JSON reports' readers, the HTML page, the option grammar and
# the parsers of byte sizes, durations and step rules, the memory_viz writer), built by clang with
# libFuzzer, AddressSanitizer and UBSan into build/fuzz.
#
#   scripts/fuzz.sh --regression      # each target over its corpus once (the test command runs this)
#   scripts/fuzz.sh --seconds N       # fuzz each target for N seconds; executions and coverage
#
# Fuzzing starts from fuzz/corpus/TARGET (seeds: real reports) and grows a working copy in
# build/fuzz/corpus-TARGET; an input that crashes is written to build/fuzz/crashes/ and belongs,
# once fixed, in fuzz/corpus/TARGET, where the regression run replays it. Exits 1 when a target
# failed, 3 when there is no clang to build them with.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
seconds="${2:-60}"
case "$mode" in
  --regression) ;;
  --seconds) [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --seconds takes a positive number" >&2; exit 2; } ;;
  *) echo "usage: scripts/fuzz.sh --regression | --seconds N" >&2; exit 2 ;;
esac
compiler="${MEMSEAL_FUZZ_CXX:-clang++}"
if ! command -v "$compiler" >/dev/null; then
  echo "memseal: no $compiler: the fuzz targets need clang (libFuzzer); skipped" >&2
  exit 3
fi
source "$root/scripts/env.sh"
build="$root/build/fuzz"
# The memory_viz writer's target needs libtorch: the torch package of the project's Python.
torch_dir=$("$MEMSEAL_PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
if ! { cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$compiler" "${launcher[@]}" \
         -DMEMSEAL_FUZZ_TORCH="$torch_dir" &&
       cmake --build "$build" -j "${MEMSEAL_JOBS:-$(nproc)}"; } >"$build/build.log" 2>&1; then
  cat "$build/build.log" >&2
  echo "fuzz.sh: the fuzz targets do not build" >&2
  exit 1
fi
status=0
targets=(reports html options whatif)
if [ -n "$torch_dir" ]; then
  targets+=(memory_viz)
else
  echo "fuzz_memory_viz: $MEMSEAL_PYTHON cannot import torch: skipped" >&2
fi
for target in "${targets[@]}"; do
  program="$build/fuzz_$target"
  if [ "$mode" = --regression ]; then
    # -runs=0: every input of the corpus once, then exit.
    if "$program" -runs=0 "$root/fuzz/corpus/$target" >"$build/regression-$target.log" 2>&1; then
      echo "fuzz_$target: $(ls "$root/fuzz/corpus/$target" | wc -l) inputs of its corpus replayed, no failure"
    else
      cat "$build/regression-$target.log" >&2
      echo "fuzz_$target: FAILED on its corpus" >&2
      status=1
    fi
    continue
  fi
  mkdir -p "$build/corpus-$target" "$build/crashes"
  cp -n "$root/fuzz/corpus/$target"/* "$build/corpus-$target/"
  log="$build/fuzz-$target.log"
  if "$program" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$build/crashes/$target-" "$build/corpus-$target" >"$log" 2>&1; then
    result="no failure"
  else
    result="FAILED (see $log and $build/crashes/)"
    status=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  echo "fuzz_$target: $runs executions in $seconds s, $coverage edges covered, corpus $(ls "$build/corpus-$target" | wc -l) inputs: $result"
done
exit "$status"
