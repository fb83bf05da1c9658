#!/usr/bin/env bash
# The planned-arena benchmark: glibc malloc, tcmalloc and jemalloc (Debian's, via LD_PRELOAD), the
# memseal arena (on glibc, and on tcmalloc for the small objects it does not serve) and, for
# reference, an exact-size caching allocator, on the conv net, the transformer encoder layer and
# the MLP. Processes of all
# configurations are interleaved, repetition by repetition; medians of the per-process medians.
# Usage: bench/run_arena_bench.sh [BUILD_DIR] [REPETITIONS]
# MEMSEAL_BENCH_MODELS picks models (default: conv transformer mlp); MEMSEAL_BENCH_THREADS sets the
# intra-op threads (default 1, as in the core issue's benchmark (a)).
set -euo pipefail
build="${1:-build/release}"; repetitions="${2:-5}"
binary="$build/bench/memseal_bench_arena"
[ -x "$binary" ] || { echo "no $binary: build first (scripts/build.sh release)" >&2; exit 2; }
[[ "$repetitions" =~ ^[1-9][0-9]*$ ]] || { echo "repetitions must be a positive integer, not '$repetitions'" >&2; exit 2; }
libdir=/usr/lib/x86_64-linux-gnu
declare -A preload=([glibc]="" [tcmalloc]="$libdir/libtcmalloc_minimal.so.4" [jemalloc]="$libdir/libjemalloc.so.2")
configs=("glibc plain" "tcmalloc plain" "jemalloc plain" "glibc arena" "glibc arena-small-pages" "tcmalloc arena"
         "glibc cache")
results="$(mktemp)"; trap 'rm -f "$results"' EXIT
models="${MEMSEAL_BENCH_MODELS:-conv transformer mlp}"
threads="${MEMSEAL_BENCH_THREADS:-1}"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "MEMSEAL_BENCH_THREADS must be a positive integer, not '$threads'" >&2; exit 2; }
echo "intra-op threads: $threads"
for model in $models; do
  iterations=40; [ "$model" = mlp ] && iterations=2000
  for ((r = 0; r < repetitions; r++)); do
    for config in "${configs[@]}"; do
      read -r allocator mode <<<"$config"
      lib="${preload[$allocator]}"
      if [ -n "$lib" ] && [ ! -e "$lib" ]; then echo "missing $lib (apt-get install libtcmalloc-minimal4 libjemalloc2)" >&2; exit 2; fi
      line="$(OMP_NUM_THREADS="$threads" MEMSEAL_BENCH_THREADS="$threads" LD_PRELOAD="$lib" "$binary" --model "$model" --mode "$mode" --iterations "$iterations")"
      echo "allocator=$allocator $line" >>"$results"
    done
  done
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
def median(model, allocator, mode, field):
    return statistics.median(float(r[field]) for r in rows
                             if r["model"] == model and r["allocator"] == allocator and r["mode"] == mode)
print(f"{'model':12} {'configuration':18} {'median ms':>10} {'vs glibc':>9} {'vs tcmalloc':>11} "
      f"{'peak RSS MiB':>12} {'held MiB':>8} {'alloc calls':>11} {'plan/lower':>10}")
for model in [m for m in ["conv", "transformer", "mlp"] if any(r["model"] == m for r in rows)]:
    glibc = median(model, "glibc", "plain", "median_ms")
    tc = median(model, "tcmalloc", "plain", "median_ms")
    names = {("glibc", "plain"): "glibc", ("tcmalloc", "plain"): "tcmalloc",
             ("jemalloc", "plain"): "jemalloc", ("glibc", "arena"): "memseal arena",
             ("glibc", "arena-small-pages"): "arena, 4 KiB pages",
             ("tcmalloc", "arena"): "arena + tcmalloc", ("glibc", "cache"): "exact-size cache"}
    for (allocator, mode), name in names.items():
        ms = median(model, allocator, mode, "median_ms")
        rss = median(model, allocator, mode, "peak_rss_kib") / 1024
        calls = median(model, allocator, mode, "allocator_calls")
        held = median(model, allocator, mode, "held_bytes") / 2**20
        plan = ""
        if mode.startswith("arena"):
            lower = median(model, allocator, mode, "lower_bound")
            plan = f"{median(model, allocator, mode, 'block_bytes') / lower:.3f}" if lower else "-"
        print(f"{model:12} {name:18} {ms:10.4f} {glibc / ms:8.2f}x {tc / ms:10.2f}x {rss:12.1f} {held:8.1f} {calls:11.0f} {plan:>10}")
PY
