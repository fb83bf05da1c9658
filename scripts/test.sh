#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test: the plain build, the
# AddressSanitizer+UBSan build, the ThreadSanitizer build of the concurrency tests, then the
# Python module (installed into the venv) and its pytest suite, then the documentation site.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
root="$(cd "$here/.." && pwd)"
"$here/bootstrap.sh"
# No folder of src/ includes a higher layer's headers (docs/developers/layout.md); no file over 600
# lines, no function over 80.
status=0
python3 "$here/check_layers.py" || status=1
python3 "$here/check_sizes.py" || status=1
# The fuzz targets (the JSON readers, the HTML page) over their corpora, as regression tests:
# fuzzing itself is `scripts/fuzz.sh --seconds N`, outside this command's time.
fuzz_status=0
"$here/fuzz.sh" --regression || fuzz_status=$?
[ "$fuzz_status" -eq 0 ] || [ "$fuzz_status" -eq 3 ] || status=1
# Headless Chromium opens the HTML reports in the tests (they are skipped where it cannot be had).
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && command -v apt-get >/dev/null; then
  echo "memseal: installing chromium for the HTML report tests" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  { "${sudo_cmd[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq chromium >/dev/null; } ||
    echo "memseal: chromium could not be installed; the browser checks will be skipped" >&2
fi
run_flavour() {
  local flavour="$1" targets="$2"; shift 2
  echo "=== memseal tests: $flavour build" >&2
  MEMSEAL_TARGETS="$targets" "$here/build.sh" "$flavour"
  (cd "$root/build/$flavour" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || status=1
}
run_flavour release ""
run_flavour asan ""
# ThreadSanitizer: the unit tests that start threads and the concurrency tests of the tracker, the
# planned arena and the tensor pool (libtorch is not instrumented).
TSAN_OPTIONS="suppressions=$root/tests/tsan.supp halt_on_error=1" \
  run_flavour tsan "memseal_unit_tests memseal_integration_tests"
# The Python module, installed into the venv, and its tests (pytest's pytester included).
echo "=== memseal tests: Python module" >&2
python_status=0
"$here/install_python.sh" || python_status=$?
source "$here/env.sh"
if [ "$python_status" -eq 0 ] && "$MEMSEAL_PYTHON" -c 'import pytest' 2>/dev/null; then
  # One worker per core where pytest-xdist is installed (bootstrap.sh gives the venv it).
  parallel=()
  "$MEMSEAL_PYTHON" -c 'import xdist' 2>/dev/null && parallel=(-n "$(nproc)")
  # The slowest tests' times close the output, as ctest's close each of its tests.
  (cd "$root/tests/python" &&
    "$MEMSEAL_PYTHON" -m pytest -q -p no:cacheprovider --durations=15 "${parallel[@]}") || status=1
elif [ "$python_status" -eq 0 ] || [ "$python_status" -eq 3 ]; then
  # Only with a Python of the caller's (PYTHON=...) that lacks pytest or scikit-build-core.
  echo "memseal: Python tests skipped: $MEMSEAL_PYTHON lacks pytest or scikit-build-core" >&2
else
  status=1
fi
# The documentation site (docs/, mkdocs.yml): built strictly (a broken link or anchor fails it), then
# every Python example of the site and the README run against the installed package, and every
# memseal command line they show checked against the command's own help.
echo "=== memseal tests: documentation" >&2
if [ "$python_status" -eq 0 ] && "$MEMSEAL_PYTHON" -c 'import mkdocs, pytest_markdown_docs' 2>/dev/null; then
  (cd "$root" && NO_MKDOCS_2_WARNING=1 "$MEMSEAL_PYTHON" -m mkdocs build --strict --quiet \
      --site-dir "$root/build/site") || status=1
  (cd "$root/tests/docs" && "$MEMSEAL_PYTHON" -m pytest -q -p no:cacheprovider --markdown-docs \
      . ../../docs ../../README.md) || status=1
else
  echo "memseal: documentation checks skipped: $MEMSEAL_PYTHON lacks mkdocs or pytest-markdown-docs" >&2
fi
exit $status
