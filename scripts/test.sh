#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test: the plain build, the
# AddressSanitizer+UBSan build, and the ThreadSanitizer build of the concurrency tests.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
root="$(cd "$here/.." && pwd)"
"$here/bootstrap.sh"
status=0
run_flavour() {
  local flavour="$1"; shift
  echo "=== memseal tests: $flavour build" >&2
  "$here/build.sh" "$flavour"
  (cd "$root/build/$flavour" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || status=1
}
run_flavour release
run_flavour asan
run_flavour tsan -L concurrency
exit $status
