#!/usr/bin/env bash
# Instructions per inference of the MLP (planned-arena benchmark (c)) under Valgrind's callgrind,
# which the machine's noise does not move: each configuration runs twice, with 500 and 2,500 timed
# inferences, and the difference of the two totals over 2,000 is one inference, start-up excluded.
# Usage: bench/arena_instruction_counts.sh [BUILD_DIR] [OUT_DIR]
# MEMSEAL_BENCH_CONFIGS picks configurations (default: all five below, "allocator:mode").
# About 2.5 minutes per run here (ten runs in all). The callgrind files stay in OUT_DIR for
# callgrind_annotate.
set -euo pipefail
build="${1:-build/release}"
out="${2:-$(mktemp -d)}"
binary="$build/bench/memseal_bench_arena"
[ -x "$binary" ] || { echo "no $binary: build first (scripts/build.sh release)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 2; }
mkdir -p "$out"
libdir=/usr/lib/x86_64-linux-gnu
configs="${MEMSEAL_BENCH_CONFIGS:-glibc:plain tcmalloc:plain glibc:arena tcmalloc:arena glibc:cache}"
echo "callgrind files in $out"
printf '%-10s %-6s %14s\n' allocator mode "Ir/inference"
for config in $configs; do
  allocator="${config%%:*}" mode="${config#*:}"
  case "$allocator" in
    glibc) lib="" ;;
    tcmalloc) lib="$libdir/libtcmalloc_minimal.so.4" ;;
    *) echo "unknown allocator '$allocator' (glibc or tcmalloc)" >&2; exit 2 ;;
  esac
  case "$mode" in plain | arena | cache) ;; *) echo "unknown mode '$mode' (plain, arena, cache)" >&2; exit 2 ;; esac
  if [ -n "$lib" ] && [ ! -e "$lib" ]; then echo "missing $lib (apt-get install libtcmalloc-minimal4)" >&2; exit 2; fi
  declare -A total=()
  for iterations in 500 2500; do
    file="$out/$allocator-$mode-$iterations.callgrind"
    LD_PRELOAD="$lib" valgrind --tool=callgrind --callgrind-out-file="$file" \
      "$binary" --model mlp --mode "$mode" --iterations "$iterations" >/dev/null 2>"$file.log"
    total[$iterations]="$(awk '/^(summary|totals):/ {print $2; exit}' "$file")"
  done
  printf '%-10s %-6s %14.0f\n' "$allocator" "$mode" "$(( (total[2500] - total[500]) / 2000 ))"
done
