#!/usr/bin/env bash
# The GPU acceptance check (issue 39, docs/gpu-validation.md): on an NVIDIA host, with or without Docker,
# it runs the probe natively (`builder probe --json --require-gpu`), `builder fit --library` over every
# installed framework's libraries with both readers (the fatbin reader and cuobjdump) and compares them,
# `builder doctor`, and tests/test_probe.py; with Docker and the NVIDIA runtime also `builder test --gpu
# require` on the CUDA slice. It writes one JSON summary (build/gpu-check/summary.json, or --out DIR).
#
#   [PYTHON=python3] bash scripts/gpu-check.sh [--out DIR] [--steps probe,fit,doctor,probe-tests,slice]
#
# PYTHON is the interpreter that has the frameworks (default: python3 on PATH), run from this copy of the
# repository; pure-Python packages the machine lacks come on PYTHONPATH (docs/gpu-validation.md: carried
# wheels). Exit 0: every step passed on a GPU; 1: something failed; 3: no NVIDIA GPU here, which is
# never a pass; 2: bad options.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "gpu-check: error: no $PYTHON: set PYTHON to the interpreter that has the frameworks" >&2
    exit 2
fi
exec "$PYTHON" scripts/gpu_check.py "$@"
