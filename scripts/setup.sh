#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh Debian machine: the project venv and a Docker engine
# with a local registry (host networking only; see .ci/docker-up.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import builder, hypothesis, dockerfile, selenium, jsonschema, xdist, cyclonedx; from builder.fit.cuobjdump import find_binary; find_binary()' 2>/dev/null || [ ! -x .venv/bin/actionlint ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
fi
if ! command -v ssh-keygen >/dev/null 2>&1; then  # OpenSSH signs and verifies the published evidence (ssh-keygen -Y)
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client >/dev/null
fi
bash .ci/docker-up.sh
