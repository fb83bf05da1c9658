#!/usr/bin/env bash
# Times one of the README's two commands as a new contributor meets it: a fresh clone of HEAD, no
# build folders, an empty ccache (torch already in the per-user venv). Prints the time of each phase
# (build and tests of each flavour, the Python module, pytest) and, per build folder, the compile
# seconds by part of the tree from ninja's log.
# Usage: bench/fresh_build_time.sh test|demo [work-folder]   (default work folder: a new mktemp -d)
set -euo pipefail
command_name="${1:-}"
case "$command_name" in
  test) script=scripts/test.sh ;;
  demo) script=scripts/demo.sh ;;
  *) echo "usage: $0 test|demo [work-folder]" >&2; exit 2 ;;
esac
source_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${2:-$(mktemp -d)}"
if [ -e "$work/memseal" ]; then
  echo "memseal: $work/memseal exists; give an empty work folder" >&2
  exit 2
fi
mkdir -p "$work/ccache"
git clone -q "$source_root" "$work/memseal"
log="$work/$command_name.log"
start=$(date +%s)
status=0
(cd "$work/memseal" && CCACHE_DIR="$work/ccache" "./$script") 2>&1 |
  while IFS= read -r line; do echo "$(($(date +%s) - start)) $line"; done > "$log" || status=$?
total=$(($(date +%s) - start))

echo "memseal: $script from a fresh clone with an empty ccache: ${total} s, exit $status (log: $log)"
# Phases of the test command: from each "=== memseal tests: <phase>" marker and each ctest summary
# to the next (the demo's figure is its total).
[ "$command_name" = test ] && awk -v total="$total" '
  BEGIN { last_name = "checks, fuzz regression"; last_t = 0 }
  function mark(t, name) {
    if (last_name != "") printf "  %-24s %5d s\n", last_name, t - last_t
    last_name = name; last_t = t
  }
  / === memseal tests: / { what = substr($0, index($0, "tests: ") + 7); mark($1, what)
                           flavour = what; sub(/ build$/, "", flavour) }
  / Test project / { mark($1, flavour " tests") }
  / memseal: the Python package is installed/ { mark($1, "pytest") }
  END { if (last_name != "") printf "  %-24s %5d s\n", last_name, total - last_t }' "$log"
for ninja_log in "$work"/memseal/build/*/.ninja_log; do
  [ -f "$ninja_log" ] || continue
  echo "compile and link seconds in $(basename "$(dirname "$ninja_log")") (summed over jobs):"
  awk 'NR > 1 { seconds = ($2 - $1) / 1000; target = $4; part = "other"
                if (target ~ /memseal_internal/) part = "libmemseal"
                else if (target ~ /memseal_pch_/) part = "precompiled headers"
                else if (target ~ /^tests\//) part = "tests"
                else if (target ~ /^examples\//) part = "examples"
                else if (target ~ /^bench\//) part = "benchmarks"
                else if (target ~ /src\/(cli|inject)\//) part = "CLI and run libraries"
                if (target !~ /\.o$|\.gch$/) part = "links"
                sum[part] += seconds; all += seconds }
       END { for (part in sum) printf "  %-24s %6.0f s\n", part, sum[part]; printf "  %-24s %6.0f s\n", "total", all }' \
      "$ninja_log"
done
exit "$status"
