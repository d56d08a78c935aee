#!/usr/bin/env bash
# The main job on the embedded matrix's default selection: bootstrap the local base, build the
# images, smoke-test them in locked-down containers, publish the ones that passed to the local
# registry (recorded in catalog/known-good.json), write the support matrix, and print the line a
# teammate runs to get the same digest. Extra args go to `builder run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
REGISTRY="${BUILDER_PUBLISH_REGISTRY:-127.0.0.1:5000/gpu-images}"
.venv/bin/builder run "$@"
.venv/bin/builder publish --registry "$REGISTRY"
.venv/bin/builder report
.venv/bin/builder catalog
echo "a teammate gets the same image, by digest: .venv/bin/builder pull torch=2.13 python=3.11"
