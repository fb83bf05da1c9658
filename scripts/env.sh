# Shared settings for memseal's scripts: where the cached toolchain lives and which torch to use.
# Sourced, not run. Honours PYTHON (a Python that already has a torch memseal builds against,
# 2.9 up to 2.15) and Torch_DIR; the pinned release is the development environment's.
MEMSEAL_TORCH_VERSION="2.11.0"
MEMSEAL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEMSEAL_CACHE="${MEMSEAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memseal}"
MEMSEAL_VENV="$MEMSEAL_CACHE/venv-torch-$MEMSEAL_TORCH_VERSION"
export CCACHE_DIR="${CCACHE_DIR:-$MEMSEAL_CACHE/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Paths relative to the checkout, so a fresh clone (CI) hits the cache of an earlier one.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$MEMSEAL_ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# Tests, examples and benchmarks reuse a precompiled <torch/torch.h>: ccache caches such
# compilations only when told to ignore the header's timestamps and __TIME__-style macros.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
# The venv's Python unless the caller brought their own.
MEMSEAL_PYTHON="${PYTHON:-$MEMSEAL_VENV/bin/python}"
