#!/usr/bin/env bash
# The test suite: lint, types, images/ and its locks current, then pytest (unit + Docker integration tests).
# It starts the engine itself, so a missing engine is a failure here, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export BUILDER_REQUIRE_DOCKER=1 BUILDER_REQUIRE_BROWSER=1
.venv/bin/ruff check builder tests benchmarks
.venv/bin/ruff format --check builder tests benchmarks
.venv/bin/mypy builder tests
.venv/bin/builder render --check
.venv/bin/builder lock --check
exec .venv/bin/python -m pytest "$@"
