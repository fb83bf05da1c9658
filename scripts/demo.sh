#!/usr/bin/env bash
# The main job: installs what is missing, builds what the demo runs (libmemseal, the memseal
# command, the demo's loops and the example cases), runs the demo, then shows the command on the
# cases (check with its HTML page, explain, fit), `memseal run` on the unmodified example server, and installs the Python package into the venv to
# show `python -m memseal check` and its `memseal run` on a whole Python training program.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
root="$(cd "$here/.." && pwd)"
"$here/bootstrap.sh"
MEMSEAL_TARGETS="memseal_demo memseal_cli memseal_case_leaky_loss memseal_case_training memseal_case_sized_mlp memseal_inference_server" \
  "$here/build.sh" release
reports="$root/build/release/reports"; mkdir -p "$reports"
"$root/build/release/memseal-demo" "$@"
echo
echo "=== memseal check build/release/cases/leaky_loss_case.so  (the command line, on a shared library)"
status=0
"$root/build/release/memseal" check --steps 15 --warmup 3 --html "$reports/check.html" \
  "$root/build/release/cases/leaky_loss_case.so" || status=$?
# `memseal check` exits 1 when it finds a leak, which this case has on purpose.
[ "$status" -eq 1 ] || { echo "memseal demo: expected the leaky case to be found (exit 1), got $status" >&2; exit 1; }
echo
echo "=== memseal explain build/release/cases/training_case.so  (what the peak of a training step holds)"
"$root/build/release/memseal" explain --html "$reports/explain.html" "$root/build/release/cases/training_case.so"
echo
echo "=== memseal fit --sizes 64,128,192,256 --budget 64MiB --verify build/release/cases/sized_mlp_case.so"
"$root/build/release/memseal" fit --sizes 64,128,192,256 --budget 64MiB --verify \
  --html "$reports/fit.html" "$root/build/release/cases/sized_mlp_case.so"
echo
echo "=== memseal run -- build/release/examples/inference_server --requests 3000 --leak history  (an unmodified server)"
status=0
"$root/build/release/memseal" run --fail-on-leak --html "$reports/run.html" -- \
  "$root/build/release/examples/inference_server" --requests 3000 --leak history > /dev/null || status=$?
[ "$status" -eq 1 ] || { echo "memseal demo: expected the leaky server to be found (exit 1), got $status" >&2; exit 1; }
echo "memseal: the HTML pages are in $reports (check.html, explain.html, fit.html, run.html)"
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
  echo
  echo "=== python -m memseal run -- python examples/scripts/phases.py --leak total-local  (the memseal command of the Python package, as pip installs it, on a whole training program: epochs of training and validation, then a test pass; the total is freed when train() returns)"
  status=0
  "$MEMSEAL_PYTHON" -m memseal run --fail-on-leak -- "$MEMSEAL_PYTHON" "$root/examples/scripts/phases.py" \
    --leak total-local > /dev/null || status=$?
  [ "$status" -eq 1 ] || { echo "memseal demo: expected the leaky training program to be found (exit 1), got $status" >&2; exit 1; }
fi
echo
echo "memseal: the command is build/release/memseal; \`memseal --help\` lists what it does."
[ "$python_status" -ne 0 ] ||
  echo "memseal: Python: $("$MEMSEAL_PYTHON" -c 'import sys; print(sys.prefix)')/bin/python -m memseal run|check|explain|fit|report|plan ... (or the memseal command beside it)"
