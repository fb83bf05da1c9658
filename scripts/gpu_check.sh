#!/usr/bin/env bash
# Everything that needs a CUDA GPU, in one run: builds memseal against this machine's torch (the
# CUDA tests and benchmark in build/release, the Python package installed into $PYTHON's
# environment, both at once), then runs the CUDA C++ tests, the Python tests of CUDA loops
# (tests/python/test_cuda*.py), the loops' reports as a user sees them, and the GPU benchmarks.
# Needs no network: GoogleTest comes from an installed copy or .carried/googletest (DEVELOPERS.md).
#
#   scripts/gpu_check.sh [LOG_FOLDER]      # default /tmp/memseal-gpu
#
# Each part's output goes to its own log in LOG_FOLDER; summary.txt lists each part with its exit
# status and seconds. Exits 1 when a part failed, 0 otherwise.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:-/tmp/memseal-gpu}" && cd "${1:-/tmp/memseal-gpu}" && pwd)"
export PYTHON="${PYTHON:-$(command -v python3)}" PYTHONUNBUFFERED=1
jobs="${MEMSEAL_JOBS:-$(nproc)}"
cd "$root"
failed=0

# part NAME LOG COMMAND...: runs COMMAND (a command or one of the functions below) with its output
# appended to LOG, notes the result. A part that hangs is stopped after MEMSEAL_PART_TIMEOUT
# seconds (exit 124), so the parts after it still run and their logs come back.
part() {
  local name="$1" log="$out/$2" started status
  shift 2
  started=$(date +%s)
  echo "=== $name: $*" >>"$log"
  timeout -k 10 "${MEMSEAL_PART_TIMEOUT:-420}" bash -c '"$@"' part "$@" >>"$log" 2>&1
  status=$?
  printf '%-34s exit %3d  %4d s\n' "$name" "$status" "$(($(date +%s) - started))" | tee -a "$out/summary.txt"
  [ "$status" -eq 0 ] || failed=1
  return "$status"
}

build_cpp() {
  MEMSEAL_JOBS=$((jobs / 2 > 0 ? jobs / 2 : 1)) \
    MEMSEAL_TARGETS="memseal memseal_integration_tests memseal_device_memory_tests memseal_bench_cuda_region" \
    scripts/build.sh release -DMEMSEAL_WERROR=OFF
}

build_python() {
  CMAKE_GENERATOR=Ninja CMAKE_BUILD_PARALLEL_LEVEL=$((jobs / 2 > 0 ? jobs / 2 : 1)) \
    "$PYTHON" -m pip install --no-build-isolation --no-deps --disable-pip-version-check -q .
}

export -f build_cpp build_python
export jobs

{
  nvidia-smi -L
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
    "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
} >"$out/summary.txt" 2>&1

part "build: C++ CUDA tests, benchmark" build.log build_cpp &
cpp_build=$!
part "build: Python package" build_python.log build_python &
python_build=$!
wait "$cpp_build" || failed=1
wait "$python_build" || failed=1

# Which compiler built the module, that no libstdc++ of its own is linked into it (the module and
# libtorch must share one: cmake/MemsealLibstdcxx.cmake), and that an in-process report formats.
cpu_report_in_process() {
  "${CXX:-c++}" --version | head -1
  "$PYTHON" -X faulthandler - <<'PY'
import importlib, re, subprocess, torch, memseal
module = importlib.import_module("memseal._memseal").__file__
symbols = subprocess.run(["nm", "--defined-only", module], capture_output=True, text=True).stdout
print(module, "holds libstdc++'s own code" if "_ZNSt6locale7classicEv" in symbols else "uses the shared libstdc++")
kept = []
report = memseal.check(lambda i: kept.append(torch.ones(256)), steps=10, warmup=2, on_leak="none")
text = report.text()
print(text)
assert re.search(r"LEAK: \d+ findings? in 8 steps after 2 warm-up steps", text), "numbers missing"
PY
}
report() { "$PYTHON" -m memseal "$@"; return 0; }
export -f cpu_report_in_process report
part "in-process report, CPU loop" reports.log cpu_report_in_process

tests=build/release/tests
for source in pool cuda_memory cuda_region device_memory; do
  if [ "$source" = device_memory ]; then
    part "C++: $source" cpp_tests.log "$tests/memseal_device_memory_tests"
  else
    part "C++: $source" cpp_tests.log "$tests/memseal_integration_tests" --memseal_source="${source}_test.cpp"
  fi
done
part "C++: pinned staging" cpp_tests.log "$tests/memseal_integration_tests" \
  --gtest_filter='HostStaging.*:TensorPool.Pinned*'
# In-process tests in one process (a crash shows its Python stack), the scripts' in parallel.
part "pytest: CUDA loops in-process" pytest.log "$PYTHON" -m pytest -p no:cacheprovider -v \
  tests/python/test_cuda.py
part "pytest: examples/cuda scripts" pytest.log "$PYTHON" -m pytest -p no:cacheprovider -v -n 8 \
  tests/python/test_cuda_scripts.py

# What a user sees: the reports of one leak and one healthy loop, and an out-of-memory error.
part "report: total_loss (check)" reports.log report check examples/cuda/total_loss.py
part "report: cached_blocks (run)" reports.log report run -- "$PYTHON" examples/cuda/cached_blocks.py
oom="$(mktemp -d)"
MEMSEAL_OOM_DIR="$oom" part "report: out of memory (run)" reports.log report run \
  --memory-viz "$oom/oom.pickle" -- "$PYTHON" examples/cuda/growing_batch_oom.py --limit-gib 2
part "memory_viz of the out of memory" reports.log "$PYTHON" tests/report/memory_viz_check.py \
  "$oom/oom.pickle" --expect-cuda-devices 1
for forensics in "$oom"/memseal-cuda-oom-*.json; do
  [ -e "$forensics" ] && { echo "=== $forensics"; cat "$forensics"; } >>"$out/reports.log"
done

# The allocator model's reserved peak and out-of-memory answer against the allocator's own, five
# workloads under four settings; the table is in bench.log, the snapshots (candidates for small
# recorded test traces) and results.json in /tmp/memseal-allocator-model.
part "bench: allocator model vs torch" bench.log "$PYTHON" bench/python/allocator_model_check.py \
  --memseal build/release/memseal --out /tmp/memseal-allocator-model
part "bench: CudaRegion" bench.log build/release/bench/memseal_bench_cuda_region 5 500
part "bench: watch on the GPU" bench.log "$PYTHON" bench/python/overhead.py --device cuda --breakdown \
  --rounds "${MEMSEAL_GPU_BENCH_ROUNDS:-7}" --steps "${MEMSEAL_GPU_BENCH_STEPS:-130}" --settle 30
exit "$failed"
