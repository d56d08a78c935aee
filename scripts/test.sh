#!/usr/bin/env bash
# The test suite: lint, types, images/ and its locks current, then pytest (unit + Docker integration tests).
# It starts the engine itself, so a missing engine is a failure here, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# The integration tier runs in two lanes, one per pytest worker, each against its own engine: the
# default one, and a second dockerd that setup (.ci/docker-up.sh) starts when asked (tests/conftest.py).
export BUILDER_SECOND_ENGINE=1
# Bytecode is cached as Python does by default (.gitignore'd), even where the environment says not to:
# the suite starts hundreds of `python -m builder` processes and three pytest workers, and without the
# cache each of them compiles the package (and pytest rewrites every test module) again.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh
export BUILDER_REQUIRE_DOCKER=1 BUILDER_REQUIRE_BROWSER=1
export BUILDER_TEST_ENGINE2="${BUILDER_TEST_ENGINE2:-unix:///run/builder-engine2/docker.sock}"
.venv/bin/ruff check builder tests benchmarks
.venv/bin/ruff format --check builder tests benchmarks
.venv/bin/mypy builder tests benchmarks  # benchmarks too: a benchmark nobody runs in CI rots silently (bench_lock.py did)
.venv/bin/builder render --check
.venv/bin/builder lock --check
exec .venv/bin/python -m pytest "$@"
