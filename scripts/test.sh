#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test: the plain build, the
# AddressSanitizer+UBSan build, and the ThreadSanitizer build of the concurrency tests.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
root="$(cd "$here/.." && pwd)"
"$here/bootstrap.sh"
status=0
run_flavour() {
  local flavour="$1" targets="$2"; shift 2
  echo "=== memseal tests: $flavour build" >&2
  MEMSEAL_TARGETS="$targets" "$here/build.sh" "$flavour"
  (cd "$root/build/$flavour" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || status=1
}
run_flavour release ""
run_flavour asan ""
# ThreadSanitizer: the unit tests and the concurrency tests of the tracker and the planned arena
# (libtorch is not instrumented).
TSAN_OPTIONS="suppressions=$root/tests/tsan.supp halt_on_error=1" \
  run_flavour tsan "memseal_unit_tests memseal_tracker_concurrency_tests memseal_arena_concurrency_tests"
exit $status
