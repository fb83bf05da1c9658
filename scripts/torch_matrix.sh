#!/usr/bin/env bash
# Builds memseal against each torch release it supports and runs its tests there, one release at a
# time, then prints a table of what passed. Not part of scripts/test.sh (several GB per release).
# Usage: scripts/torch_matrix.sh [VERSION ...]   (default: every release from 2.9 to 2.15)
#
# Per release V: a virtual environment $MEMSEAL_CACHE/venv-torch-V (kept; created with torch==V
# and what the tests need when it lacks them), a build folder build/torch-V (CMake's and ccache's
# work is kept), the C++ unit tests, then the Python package installed into that environment
# (built in build/torch-V-python: beside build/torch-V, so that ccache, which sees paths relative to
# the checkout, serves the core's objects from it) and a part of the pytest suite.
# Logs: build/torch-V/matrix-*.log.
# MEMSEAL_MATRIX_TARGETS  what is built (default: the unit tests and the memseal command)
# MEMSEAL_MATRIX_PYTEST   pytest arguments, relative to tests/python (default: a part of the
#                         suite that needs no framework; "skip" skips the Python package)
# MEMSEAL_JOBS            parallel compile jobs (default: the number of cores)
# Exits 1 when a step failed for some release, 2 on a usage error.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

default_versions=(2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
versions=("$@")
((${#versions[@]})) || versions=("${default_versions[@]}")
for version in "${versions[@]}"; do
  if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "memseal: '$version' is not a torch release (like 2.15.0)" >&2
    exit 2
  fi
done
jobs="${MEMSEAL_JOBS:-$(nproc)}"
targets="${MEMSEAL_MATRIX_TARGETS:-memseal_unit_tests memseal_cli}"
pytest_args="${MEMSEAL_MATRIX_PYTEST:-test_check.py test_scope.py test_console.py test_diff.py test_explain.py}"
# What the Python module's build and the pytest suite need beside torch (scripts/bootstrap.sh's
# list, without the frameworks: their pins follow the default torch).
test_packages=("scikit-build-core>=0.10" "pytest>=8" "pytest-xdist>=3" "ipython>=8" "ipykernel>=6"
               "nbclient>=0.10" "nbformat>=5" "pillow>=10")
test_modules="scikit_build_core, pytest, xdist, IPython, ipykernel, nbclient, nbformat, PIL"

torch_version() { "$1" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true; }
elapsed() { echo "$((SECONDS - $1))s"; }

# The venv of one release, created or completed. torch is installed with its dependencies: the
# Linux wheels on PyPI link libtorch_cuda, which needs the nvidia-* CUDA packages even on a machine
# without a GPU (with --no-deps, `import torch` 2.15 fails: libcufile.so.0 not found).
prepare_venv() {
  local version="$1" venv="$2" log="$3"
  local python="$venv/bin/python"
  if [ "$(torch_version "$python")" != "$version" ]; then
    [ -x "$python" ] || python3 -m venv "$venv" >>"$log" 2>&1 || return 1
    "$python" -m pip install --disable-pip-version-check "torch==$version" "numpy<3" >>"$log" 2>&1 ||
      return 1
  fi
  if ! "$python" -c "import $test_modules" 2>/dev/null; then
    "$python" -m pip install --disable-pip-version-check "${test_packages[@]}" >>"$log" 2>&1 || return 1
  fi
  [ "$(torch_version "$python")" = "$version" ]
}

build_release() {
  local python="$1" build_dir="$2" log="$3"
  local launcher=() target_args=()
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  for target in $targets; do target_args+=(--target "$target"); done
  # Torch_DIR of the caller's environment would pick another torch than the venv's.
  env -u Torch_DIR cmake -S "$MEMSEAL_ROOT" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${launcher[@]}" -DMEMSEAL_PYTHON="$python" -DMEMSEAL_BENCHMARKS=OFF >>"$log" 2>&1 &&
    cmake --build "$build_dir" -j "$jobs" "${target_args[@]}" >>"$log" 2>&1
}

# "N passed, M failed, K skipped" from a GoogleTest run's output (--gtest_brief=1 prints a line per
# failed test and no count of them).
gtest_counts() {
  local log="$1" passed failed skipped
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)"
  failed="$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sed 's/ (.*//' | sort -u | wc -l)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)"
  echo "${passed:-0} passed, $failed failed, ${skipped:-0} skipped"
}

# The Python package, built for this venv's torch in a folder of its own and installed with the
# command its refusal tells users (--no-deps: torch stays the release it is).
install_python() {
  local python="$1" build_dir="$2" log="$3"
  local launcher=()
  command -v ccache >/dev/null &&
    launcher=(CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache)
  env -u Torch_DIR CC="${CC:-cc}" CXX="${CXX:-c++}" CMAKE_GENERATOR=Ninja \
    CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "${launcher[@]}" \
    "$python" -m pip install --no-build-isolation --no-deps --force-reinstall --no-cache-dir \
    --disable-pip-version-check -C build-dir="$build_dir-python" "$MEMSEAL_ROOT" >>"$log" 2>&1
}

# "N passed" (and failed, skipped) from pytest's last line.
pytest_counts() { tail -1 "$1" | sed -e 's/^=* *//' -e 's/ in [0-9.]*s.*//' -e 's/ *=*$//'; }

declare -A result_build result_unit result_python
# A stage of one release: its log (emptied), its start time, and a line on stderr.
begin_stage() {
  log="$build_dir/matrix-$1.log"
  : >"$log"
  start=$SECONDS
  echo "=== torch $version: $2" >&2
}
status=0
for version in "${versions[@]}"; do
  venv="$MEMSEAL_CACHE/venv-torch-$version"
  build_dir="$MEMSEAL_ROOT/build/torch-$version"
  mkdir -p "$build_dir"
  result_build[$version]="-"; result_unit[$version]="-"; result_python[$version]="-"
  begin_stage venv "environment $venv"
  if ! prepare_venv "$version" "$venv" "$log"; then
    echo "memseal: could not make $venv with torch $version (see $log)" >&2
    result_build[$version]="no venv"; status=1; continue
  fi
  python="$venv/bin/python"
  begin_stage build "building $targets into $build_dir"
  if ! build_release "$python" "$build_dir" "$log"; then
    echo "memseal: the build against torch $version failed (see $log):" >&2
    grep -m 5 -E 'error|Error' "$log" >&2
    result_build[$version]="FAIL"; status=1; continue
  fi
  result_build[$version]="ok ($(elapsed $start))"
  begin_stage unit "C++ unit tests"
  if (cd "$build_dir" && ./tests/memseal_unit_tests --gtest_brief=1 >"$log" 2>&1); then
    result_unit[$version]="ok: $(gtest_counts "$log") ($(elapsed $start))"
  else
    result_unit[$version]="FAIL: $(gtest_counts "$log") ($(elapsed $start))"; status=1
    grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u >&2
  fi
  [ "$pytest_args" = "skip" ] && continue
  begin_stage python "Python package and pytest $pytest_args"
  if ! install_python "$python" "$build_dir" "$log"; then
    echo "memseal: installing the Python package against torch $version failed (see $log)" >&2
    result_python[$version]="FAIL: install"; status=1; continue
  fi
  parallel=()
  "$python" -c 'import xdist' 2>/dev/null && parallel=(-n "$jobs")
  # shellcheck disable=SC2086  # the arguments are words
  if (cd "$MEMSEAL_ROOT/tests/python" &&
      env -u PYTHONPATH "$python" -m pytest -q -p no:cacheprovider "${parallel[@]}" $pytest_args >>"$log" 2>&1); then
    result_python[$version]="ok: $(pytest_counts "$log") ($(elapsed $start))"
  else
    result_python[$version]="FAIL: $(pytest_counts "$log") ($(elapsed $start))"; status=1
  fi
done

printf '\n%-9s | %-16s | %-44s | %s\n' "torch" "build" "C++ unit tests" "Python tests"
printf '%s\n' "----------|------------------|----------------------------------------------|-------------"
for version in "${versions[@]}"; do
  printf '%-9s | %-16s | %-44s | %s\n' "$version" "${result_build[$version]}" \
    "${result_unit[$version]}" "${result_python[$version]}"
done
exit "$status"
