#!/usr/bin/env bash
# memseal's own memory over a long `memseal run`: the example inference server (healthy: its own
# memory is flat) under `memseal run` for a number of minutes, its resident memory sampled from
# /proc as it serves. The request count that fills the time is measured first, on two short runs.
#
#   bench/soak_server.sh [BUILD_DIR] [MINUTES] [SAMPLE_SECONDS]    # build/release 30 30
#
# Prints the samples (seconds since the start: resident MiB), the growth over the second half, and
# the report's verdict; exits 1 when the second half grew by more than
# MEMSEAL_SOAK_CAP_MIB (8).
set -euo pipefail
build=${1:-build/release}
minutes=${2:-30}
every=${3:-30}
cap_mib=${MEMSEAL_SOAK_CAP_MIB:-8}
server="$build/examples/inference_server"
memseal="$build/memseal"
[ -x "$server" ] && [ -x "$memseal" ] || { echo "soak_server: build $build first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Two short runs, so start-up (loading libtorch, learning the loop) drops out of the rate.
timed_ns() {
  local start
  start=$(date +%s%N)
  "$memseal" run -- "$server" --requests "$1" > /dev/null 2> "$work/calibration"
  echo $(( $(date +%s%N) - start ))
}
short=$(timed_ns 20000)
long=$(timed_ns 60000)
per_request_ns=$(( long > short ? (long - short) / 40000 : long / 60000 ))
[ "$per_request_ns" -gt 0 ] || per_request_ns=1
requests=$(( minutes * 60 * 1000000000 / per_request_ns ))
echo "# $requests requests (~$minutes min at $per_request_ns ns each under memseal run), sampled every ${every} s"

"$memseal" run -- "$server" --requests "$requests" > /dev/null 2> "$work/report" &
launcher=$!
child=""
while [ -z "$child" ] && kill -0 "$launcher" 2> /dev/null; do
  child=$(pgrep -P "$launcher" | head -1 || true)
done
started=$(date +%s)
: > "$work/samples"
while kill -0 "$child" 2> /dev/null; do
  rss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$child/status" 2> /dev/null || true)
  [ -n "$rss_kib" ] && echo "$(( $(date +%s) - started )) $rss_kib" >> "$work/samples"
  # Waits on the program itself, not a fixed sleep, so the last sample is close to its end.
  timeout "$every" tail --pid="$child" -f /dev/null || true
done
wait "$launcher" || true
python3 - "$work/samples" "$cap_mib" <<'PY'
import sys
samples = [tuple(map(int, line.split())) for line in open(sys.argv[1]) if line.strip()]
if len(samples) < 4:
    sys.exit("soak_server: too few samples")
for seconds, kib in samples:
    print(f"{seconds:6d} s  {kib / 1024:8.1f} MiB")
half = samples[len(samples) // 2]
growth = (samples[-1][1] - half[1]) / 1024
print(f"second half ({half[0]} s .. {samples[-1][0]} s): {growth:+.2f} MiB (cap {sys.argv[2]} MiB)")
sys.exit(0 if growth <= float(sys.argv[2]) else 1)
PY
status=$?
grep -E "^memseal: |^steps: [0-9]+ steps" "$work/report" | head -3
exit $status
