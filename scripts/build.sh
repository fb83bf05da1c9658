#!/usr/bin/env bash
# Configures and builds one flavour of memseal into build/<flavour>.
# Usage: scripts/build.sh [release|asan|tsan] [extra cmake args...]
# MEMSEAL_TARGETS limits what is built (default: everything).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
flavour="${1:-release}"; shift || true
case "$flavour" in
  release) cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan)    cmake_args=(-DCMAKE_BUILD_TYPE=Debug -DMEMSEAL_SANITIZE=address,undefined
                       -DMEMSEAL_BENCHMARKS=OFF) ;;
  tsan)    cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo
                       -DMEMSEAL_SANITIZE=thread -DMEMSEAL_BENCHMARKS=OFF -DMEMSEAL_CONCURRENCY_TESTS_ONLY=ON) ;;
  *) echo "memseal: unknown build flavour '$flavour' (release, asan or tsan)" >&2; exit 2 ;;
esac
build_dir="$MEMSEAL_ROOT/build/$flavour"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
torch_args=()
[ -n "${Torch_DIR:-}" ] || torch_args=(-DMEMSEAL_PYTHON="$MEMSEAL_PYTHON")
cmake -S "$MEMSEAL_ROOT" -B "$build_dir" -G Ninja "${cmake_args[@]}" "${launcher[@]}" "${torch_args[@]}" "$@" >/dev/null
targets=()
for target in ${MEMSEAL_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build_dir" -j "${MEMSEAL_JOBS:-$(nproc)}" "${targets[@]}"
