#!/usr/bin/env bash
# The main job: installs what is missing, builds what the demo runs (libmemseal, the memseal
# command, the demo's loops and one `memseal check` case), runs the demo, then shows the command
# on the case, and installs the Python module into the venv to show `python -m memseal check`.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
root="$(cd "$here/.." && pwd)"
"$here/bootstrap.sh"
MEMSEAL_TARGETS="memseal_demo memseal_cli memseal_case_leaky_loss" "$here/build.sh" release
"$root/build/release/memseal-demo" "$@"
echo
echo "=== memseal check build/release/cases/leaky_loss_case.so  (the command line, on a shared library)"
status=0
"$root/build/release/memseal" check --steps 15 --warmup 3 "$root/build/release/cases/leaky_loss_case.so" || status=$?
# `memseal check` exits 1 when it finds a leak, which this case has on purpose.
[ "$status" -eq 1 ] || { echo "memseal demo: expected the leaky case to be found (exit 1), got $status" >&2; exit 1; }
echo
echo "=== python -m memseal check examples/python/leaky_training.py  (the same, for a Python loop)"
python_status=0
"$here/install_python.sh" || python_status=$?
source "$here/env.sh"
if [ "$python_status" -eq 3 ]; then
  echo "memseal demo: Python part skipped ($MEMSEAL_PYTHON cannot build the module, see above)" >&2
else
  [ "$python_status" -eq 0 ] || exit "$python_status"
  status=0
  "$MEMSEAL_PYTHON" -m memseal check --steps 15 --warmup 3 "$root/examples/python/leaky_training.py" || status=$?
  [ "$status" -eq 1 ] || { echo "memseal demo: expected the leaky Python loop to be found (exit 1), got $status" >&2; exit 1; }
fi
echo
echo "memseal: the command is build/release/memseal; \`memseal --help\` lists what it does."
[ "$python_status" -ne 0 ] ||
  echo "memseal: Python: $("$MEMSEAL_PYTHON" -c 'import sys; print(sys.prefix)')/bin/python -m memseal check CASE.py"
