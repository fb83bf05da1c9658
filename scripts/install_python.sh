#!/usr/bin/env bash
# Builds memseal's Python package (the module, and the memseal command with what `memseal run`
# injects) and installs it (`pip install --no-build-isolation .`) into the
# environment of the Python memseal builds with: the per-user venv, or $PYTHON. Incremental: the
# build folder (build/python) and ccache are kept. Prints the environment's path. Exits 3 when
# that Python lacks scikit-build-core (a $PYTHON of the caller's; bootstrap.sh gives the venv one).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if ! "$MEMSEAL_PYTHON" -c 'import scikit_build_core' 2>/dev/null; then
  echo "memseal: $MEMSEAL_PYTHON has no scikit-build-core, which building the Python module needs" \
       "(pip install scikit-build-core); not installing it" >&2
  exit 3
fi
# The compiler scripts/build.sh configures with (CMake's default, c++), so ccache serves the core's
# objects from the release build instead of compiling them again under another compiler name.
export CC="${CC:-cc}" CXX="${CXX:-c++}"
command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
export CMAKE_GENERATOR=Ninja CMAKE_BUILD_PARALLEL_LEVEL="${MEMSEAL_JOBS:-$(nproc)}"
# Warnings as errors, as scripts/build.sh has them (the wheel's default is off, for compilers
# memseal was not tried with): the same flags are what lets ccache give the core's objects from the
# release build (48 of the module's 56 compiles) rather than compile them again.
"$MEMSEAL_PYTHON" -m pip install --no-build-isolation --no-deps --disable-pip-version-check -q \
    --config-settings=cmake.define.MEMSEAL_WERROR=ON "$MEMSEAL_ROOT" >&2
prefix="$("$MEMSEAL_PYTHON" -c 'import sys; print(sys.prefix)')"
echo "memseal: the Python package is installed in $prefix: $prefix/bin/memseal run -- python train.py," \
     "$prefix/bin/python -m memseal check CASE.py" >&2
