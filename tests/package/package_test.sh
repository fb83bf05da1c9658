#!/usr/bin/env bash
# memseal as an installed package: `cmake --install` into a fresh prefix, then a consumer outside
# the tree configured with find_package(memseal) against that prefix, built and run; and the
# installed `memseal` command.
# Usage: package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"; source_dir="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for path in include/memseal/tracker.h include/memseal/leak_detector.h bin/memseal \
            lib/cmake/memseal/memsealConfig.cmake lib/cmake/memseal/memsealConfigVersion.cmake \
            lib/cmake/memseal/memsealTargets.cmake; do
  [ -e "$work/prefix/$path" ] || { echo "FAIL: $path is not installed"; exit 1; }
done
ls "$work/prefix"/lib*/libmemseal.so* >/dev/null || { echo "FAIL: libmemseal is not installed"; exit 1; }
# The consumer names nothing but the prefix: memseal's config finds the libtorch it was built with.
cmake -S "$source_dir/tests/package/consumer" -B "$work/consumer" -G Ninja \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; echo "FAIL: the consumer does not configure"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; echo "FAIL: the consumer does not build"; exit 1; }
output="$("$work/consumer/consumer")"
echo "$output"
[[ "$output" == *"tensors-retained"* ]] || { echo "FAIL: the consumer did not find its leak"; exit 1; }
"$work/prefix/bin/memseal" --version
echo "package test passed"
