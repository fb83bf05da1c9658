#!/usr/bin/env bash
# A toolchain that links libstdc++ statically (g++ wrapped with -static-libstdc++) must still give
# memseal's shared objects the shared libstdc++ (cmake/MemsealLibstdcxx.cmake): a module built by
# such a compiler, loaded as Python loads memseal's (a C program, libtorch's libstdc++ loaded
# before it), formats numbers right. The same module built without the check shows the failure it
# prevents (numbers missing, or a crash) where the platform shows it; that part only informs.
# Usage: static_libstdcxx_test.sh SOURCE_DIR CXX CC
set -uo pipefail
source_dir="$1"; compiler="$2"; c_compiler="$3"
project="$source_dir/tests/toolchain/static_libstdcxx"
if [ ! -f "$("$compiler" -print-file-name=libstdc++.a)" ]; then
  echo "SKIP: $compiler has no static libstdc++ (libstdc++.a) to link"
  exit 0
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
printf '#!/bin/sh\nexec "%s" "$@" -static-libstdc++\n' "$compiler" >"$work/g++-static"
chmod +x "$work/g++-static"
"$compiler" -shared -fPIC "$project/dependency.cpp" -o "$work/libdependency.so" \
  && "$c_compiler" "$project/host.c" -o "$work/host" -ldl \
  || { echo "FAIL: the dependency or the host does not build"; exit 1; }

# module NAME [CMAKE ARGS...]: configures and builds the module in $work/NAME.
module() {
  local name="$1"
  shift
  cmake -S "$project" -B "$work/$name" -G Ninja -DCMAKE_CXX_COMPILER="$work/g++-static" \
        -DMEMSEAL_SOURCE_DIR="$source_dir" -DDEPENDENCY="$work/libdependency.so" "$@" \
        >"$work/$name.log" 2>&1 && cmake --build "$work/$name" >>"$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; echo "FAIL: the module ($name) does not build"; exit 1; }
}
expected="steps 42 of 2.5"

module with_check
grep -q "links libstdc++ statically" "$work/with_check.log" \
  || { cat "$work/with_check.log"; echo "FAIL: the check did not see the static libstdc++"; exit 1; }
output="$("$work/host" "$work/libdependency.so" "$work/with_check/libnumber_text.so" 2>&1)"
echo "with the check: $output"
[ "$output" = "$expected" ] || { echo "FAIL: expected '$expected'"; exit 1; }

module without_check -DMEMSEAL_SKIP_LIBSTDCXX_CHECK=ON
output="$("$work/host" "$work/libdependency.so" "$work/without_check/libnumber_text.so" 2>&1)"
echo "without the check (exit $?): $output"
echo "static libstdc++ test passed"
