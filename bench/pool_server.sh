#!/usr/bin/env bash
# Requests per second and p50/p99 latency of the example server (examples/server/pooled_server.cpp)
# with pools + staging + the planned arena against the same requests served with per-request
# tensors on glibc malloc and on tcmalloc (LD_PRELOAD), at 1 and 2 workers. Rounds interleave the
# three set-ups; medians over the rounds; ratios are plain glibc / the set-up (above 1: faster).
# Usage: bench/pool_server.sh BUILD_DIR [ROUNDS] [REQUESTS] [IMAGE]
# IMAGE 0 (the default) serves the MLP (activations of at most 32 KiB); IMAGE N the convolutional
# net on 3xNxN images (N=128: activations up to 32 MiB per tensor at batch 32).
set -euo pipefail
build="${1:-build/release}"; rounds="${2:-5}"; requests="${3:-4000}"; image="${4:-0}"
server="$build/examples/pooled_server"
tcmalloc="$(ldconfig -p | awk '/libtcmalloc_minimal\.so\.4 / {found = $NF} END {print found}')"
[ -n "$tcmalloc" ] || { echo "pool_server.sh: libtcmalloc_minimal.so.4 not found" >&2; exit 2; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
run() {  # run SETUP WORKERS: prints "rps p50 p99"
  local setup="$1" workers="$2" line
  case "$setup" in
    pooled) line="$("$server" --mode pooled --workers "$workers" --requests "$requests" --image "$image" 2>/dev/null | grep '^mode')" ;;
    glibc) line="$("$server" --mode plain --workers "$workers" --requests "$requests" --image "$image" 2>/dev/null | grep '^mode')" ;;
    tcmalloc) line="$(LD_PRELOAD="$tcmalloc" "$server" --mode plain --workers "$workers" --requests "$requests" --image "$image" 2>/dev/null | grep '^mode')" ;;
  esac
  echo "$line" | sed -E 's/.*: ([0-9.]+) requests\/s, p50 ([0-9.]+) us, p99 ([0-9.]+) us/\1 \2 \3/'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-8s %-9s %10s %9s %9s %12s %12s\n" workers setup "req/s" "p50 us" "p99 us" "p50 ratio" "p99 ratio"
for workers in 1 2; do
  for round in $(seq "$rounds"); do
    for setup in pooled glibc tcmalloc; do run "$setup" "$workers" >> "$work/$setup.$workers"; done
  done
  for setup in glibc pooled tcmalloc; do
    rps="$(awk '{print $1}' "$work/$setup.$workers" | median)"
    p50="$(awk '{print $2}' "$work/$setup.$workers" | median)"
    p99="$(awk '{print $3}' "$work/$setup.$workers" | median)"
    [ "$setup" = glibc ] && { base50="$p50"; base99="$p99"; }
    printf "%-8s %-9s %10.0f %9.1f %9.1f %11.2fx %11.2fx\n" "$workers" "$setup" "$rps" "$p50" "$p99" \
      "$(echo "$base50 / $p50" | bc -l)" "$(echo "$base99 / $p99" | bc -l)"
  done
done
