#!/usr/bin/env bash
# Runs bench/python/overhead.py in memseal's venv, with memray installed beside it (not into the
# venv): into ${MEMSEAL_CACHE}/bench-packages, once.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
packages="$MEMSEAL_CACHE/bench-packages"
if [ ! -d "$packages/memray" ]; then
  "$MEMSEAL_PYTHON" -m pip install -q --disable-pip-version-check --target "$packages" memray
fi
MEMSEAL_BENCH_PACKAGES="$packages" exec "$MEMSEAL_PYTHON" "$MEMSEAL_ROOT/bench/python/overhead.py" "$@"
