#!/usr/bin/env bash
# The main job on the embedded matrix's default selection: bootstrap the local base, build the
# images, smoke-test them in locked-down containers, print the summary. Extra args go to `builder run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/builder run "$@"
