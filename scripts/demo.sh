#!/usr/bin/env bash
# The main job: installs what is missing, builds memseal, and runs its demo.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
"$here/bootstrap.sh"
"$here/build.sh" release
exec "$here/../build/release/memseal" demo "$@"
