#!/usr/bin/env bash
# Runs tests over and over beside busy loops, as a loaded CI machine runs them, and prints a table
# of passes and failures per test. Each failure's output is kept in the log folder it prints.
#
#   scripts/stress_tests.sh [-n N] [--busy K] [--logs DIR] [TEST ...]
#
# N rounds (default 10) of every TEST in turn, with K busy loops (default 2) beside them. A TEST is
# FLAVOUR:NAME, a ctest test of build/FLAVOUR (release, asan, tsan) by its exact name, or
# py:NODE, a pytest node of tests/python (test_frameworks.py::test_x[loss]). Without TESTs, the
# default set: every test that has failed under load in this project's history. Builds first
# what the chosen flavours lack (scripts/build.sh); the Python tests use the installed package
# (scripts/install_python.sh). Exits 1 when any run failed, 2 on a bad argument.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/env.sh"
root="$MEMSEAL_ROOT"

default_tests=(
  release:memseal_run_phases             # a running total's reset period; totals kept for an epoch
  release:memseal_run_command            # the example server's history leak under --interval 5ms
  release:memseal_run_framework_steps    # a Python program's own steps
  release:memseal_leak_detector_tests.isolated_1  # the slow native leak, judged by resident
  release:memseal_leak_detector_tests.isolated_2  # memory, each case in a process of its own
  release:memseal_leak_detector_tests.isolated_3
  release:memseal_leak_detector_tests.isolated_4
  release:memseal_run_distributed        # ranks' reports merged
  asan:memseal_pool_tests                # LeakSanitizer's tracer at exit
  asan:memseal_tracker_concurrency_tests # the same
  py:test_frameworks.py                  # held-then-freed epoch outputs and their holder
  py:test_distributed.py                 # spawned ranks at interpreter teardown
  py:test_front_ends.py                  # the diagnosis table through check and run
)

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds=10
busy=2
logs=""
tests=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
    --busy) [ $# -ge 2 ] || usage; busy=$2; shift 2 ;;
    --logs) [ $# -ge 2 ] || usage; logs=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "stress_tests: unknown option $1" >&2; usage ;;
    *) tests+=("$1"); shift ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "stress_tests: -n takes a positive count, not '$rounds'" >&2; exit 2; }
[[ $busy =~ ^[0-9]+$ ]] || { echo "stress_tests: --busy takes a count, not '$busy'" >&2; exit 2; }
[ ${#tests[@]} -gt 0 ] || tests=("${default_tests[@]}")
flavours=()
for test in "${tests[@]}"; do
  flavour=${test%%:*}
  name=${test#*:}
  case $flavour in
    release|asan|tsan) ;;
    py) ;;
    *) echo "stress_tests: '$test' is not FLAVOUR:NAME (release, asan, tsan) or py:NODE" >&2; exit 2 ;;
  esac
  [ -n "$name" ] && [ "$name" != "$test" ] || { echo "stress_tests: '$test' names no test" >&2; exit 2; }
  [[ " ${flavours[*]-} " == *" $flavour "* ]] || flavours+=("$flavour")
done
for flavour in "${flavours[@]}"; do
  if [ "$flavour" = py ]; then
    "$MEMSEAL_PYTHON" -c 'import memseal, pytest' 2>/dev/null || "$here/install_python.sh"
  elif [ ! -f "$root/build/$flavour/CTestTestfile.cmake" ]; then
    "$here/build.sh" "$flavour"
  fi
done
if [ -z "$logs" ]; then
  logs=$(mktemp -d "${TMPDIR:-/tmp}/memseal-stress.XXXXXX")
else
  mkdir -p "$logs"
fi

busy_pids=()
stop_busy() { [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true; }
trap stop_busy EXIT
for _ in $(seq "$busy"); do
  sh -c 'while :; do :; done' &
  busy_pids+=($!)
done

declare -A passed failed seconds
for round in $(seq "$rounds"); do
  for test in "${tests[@]}"; do
    flavour=${test%%:*}
    name=${test#*:}
    log="$logs/$(printf '%s' "$test" | tr -c 'A-Za-z0-9_.-' '_')-$round.log"
    start=$(date +%s)
    if [ "$flavour" = py ]; then
      (cd "$root/tests/python" && "$MEMSEAL_PYTHON" -m pytest -q -p no:cacheprovider "$name") \
        > "$log" 2>&1 && ok=1 || ok=0
    else
      (cd "$root/build/$flavour" &&
        TSAN_OPTIONS="suppressions=$root/tests/tsan.supp halt_on_error=1" \
        ctest --output-on-failure --timeout 900 -R "^${name//./\\.}\$") > "$log" 2>&1 && ok=1 || ok=0
      # A name ctest does not know runs nothing and passes: say so rather than count it.
      if grep -q "No tests were found" "$log"; then
        echo "stress_tests: build/$flavour has no test named $name" >&2
        exit 2
      fi
    fi
    seconds[$test]=$(( ${seconds[$test]:-0} + $(date +%s) - start ))
    if [ "$ok" = 1 ]; then
      passed[$test]=$(( ${passed[$test]:-0} + 1 ))
      rm -f "$log"
    else
      failed[$test]=$(( ${failed[$test]:-0} + 1 ))
      echo "round $round: $test FAILED ($log)" >&2
    fi
  done
done

echo "| test | runs | passed | failed | mean s |"
echo "|---|---:|---:|---:|---:|"
status=0
for test in "${tests[@]}"; do
  runs=$(( ${passed[$test]:-0} + ${failed[$test]:-0} ))
  echo "| $test | $runs | ${passed[$test]:-0} | ${failed[$test]:-0} | $(( ${seconds[$test]} / runs )) |"
  [ "${failed[$test]:-0}" -eq 0 ] || status=1
done
if [ "$status" -eq 0 ]; then
  rmdir "$logs" 2>/dev/null || true
  echo "($rounds rounds beside $busy busy loops; no failure)"
else
  echo "($rounds rounds beside $busy busy loops; failures' output in $logs)"
fi
exit $status
