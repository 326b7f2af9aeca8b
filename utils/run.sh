#!/usr/bin/env bash
# The main job: set up and build, then compile, run and check the example MoE
# layers (or --config PATH) on the CPU against the numpy reference.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export MOE_BUILD_DIR=${MOE_BUILD_DIR:-$root/build}
bash "$root/utils/setup.sh"
# Run from here, so that relative paths (--config PATH) keep their meaning.
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m moec.main "$@"
