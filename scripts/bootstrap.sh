#!/usr/bin/env bash
# Installs what memseal's build needs and is missing: Debian build packages, and torch 2.11.0 from
# PyPI in a virtual environment under the per-user cache. Idempotent: a second run changes nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

debian_packages=(cmake ninja-build g++ ccache libgtest-dev libgmock-dev libbenchmark-dev
                 nlohmann-json3-dev libcli11-dev binutils libtcmalloc-minimal4 libjemalloc2
                 libunwind8 python3-venv)
missing=()
if command -v dpkg-query >/dev/null; then
  for pkg in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
fi
if ((${#missing[@]})); then
  echo "memseal: installing Debian packages: ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ -n "${Torch_DIR:-}" ]; then
  echo "memseal: using Torch_DIR=$Torch_DIR" >&2
  exit 0
fi

torch_version() { "$1" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true; }
# A caller's Python may bring any torch memseal builds against (cmake/MemsealTorch.cmake: 2.9 up
# to, not including, 2.16); the pinned one is what this script installs.
supported_torch() {
  [ -n "$1" ] && [ "$(printf '%s\n' 2.9 "$1" | sort -V | head -n 1)" = 2.9 ] &&
    [ "$(printf '%s\n' "$1" 2.16 | sort -V | head -n 1)" = "$1" ]
}
if [ -n "${PYTHON:-}" ]; then
  have="$(torch_version "$PYTHON")"
  if ! supported_torch "$have"; then
    echo "memseal: PYTHON=$PYTHON has torch '${have:-none}'; memseal builds against torch 2.9 up" \
         "to, not including, 2.16 (unset PYTHON for the pinned $MEMSEAL_TORCH_VERSION)" >&2
    exit 2
  fi
  exit 0
fi

if [ "$(torch_version "$MEMSEAL_VENV/bin/python")" != "$MEMSEAL_TORCH_VERSION" ]; then
  echo "memseal: installing torch==$MEMSEAL_TORCH_VERSION into $MEMSEAL_VENV (several GB, once)" >&2
  mkdir -p "$MEMSEAL_CACHE"
  [ -x "$MEMSEAL_VENV/bin/python" ] || python3 -m venv "$MEMSEAL_VENV"
  "$MEMSEAL_VENV/bin/python" -m pip install -q --disable-pip-version-check \
      "torch==$MEMSEAL_TORCH_VERSION" "numpy<3"
fi
# What the Python module's build and tests need, beside torch (IPython, ipykernel, nbclient and
# nbformat for the notebook tests: the extension, and a notebook run by a real kernel; Pillow for
# the HTML report's screenshot against its reference).
if ! "$MEMSEAL_VENV/bin/python" -c 'import scikit_build_core, pytest, xdist, IPython, ipykernel, nbclient, nbformat, PIL' 2>/dev/null; then
  echo "memseal: installing scikit-build-core, pytest, pytest-xdist, IPython, ipykernel, nbclient," \
       "nbformat and Pillow into $MEMSEAL_VENV" >&2
  "$MEMSEAL_VENV/bin/python" -m pip install -q --disable-pip-version-check \
      "scikit-build-core>=0.10" "pytest>=8" "pytest-xdist>=3" "ipython>=8" "ipykernel>=6" \
      "nbclient>=0.10" "nbformat>=5" "pillow>=10"
fi
# The documentation site's builder (MkDocs with the Material theme, mkdocstrings for the Python API
# reference) and the runner of the docs' Python examples, for the test command's documentation check.
if ! "$MEMSEAL_VENV/bin/python" -c 'import mkdocs, material, mkdocstrings, mkdocstrings_handlers.python, pytest_markdown_docs' 2>/dev/null; then
  echo "memseal: installing mkdocs, mkdocs-material, mkdocstrings-python and pytest-markdown-docs" \
       "into $MEMSEAL_VENV" >&2
  "$MEMSEAL_VENV/bin/python" -m pip install -q --disable-pip-version-check \
      "mkdocs==1.6.1" "mkdocs-material==9.8.2" "mkdocstrings==1.0.8" "mkdocstrings-python==2.0.11" \
      "pytest-markdown-docs==0.9.2"
fi
# The frameworks whose own Trainers the tests run unmodified under `memseal run` (tiny models built
# from configs, synthetic data: nothing is downloaded when they run). Pinned, with torch, so that
# installing them never moves torch off its pinned version.
if ! "$MEMSEAL_VENV/bin/python" -c 'import transformers, accelerate, lightning' 2>/dev/null; then
  echo "memseal: installing transformers, accelerate and lightning into $MEMSEAL_VENV" >&2
  "$MEMSEAL_VENV/bin/python" -m pip install -q --disable-pip-version-check \
      "torch==$MEMSEAL_TORCH_VERSION" "transformers==5.24.0" "accelerate==1.16.0" "lightning==2.6.6"
fi
