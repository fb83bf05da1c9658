#!/usr/bin/env bash
# The main job: installs what is missing, builds what the demo runs (libmemseal, the memseal
# command, the demo's loops and one `memseal check` case), runs the demo, then shows the command
# on the case.
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
echo "memseal: the command is build/release/memseal; \`memseal --help\` lists what it does."
