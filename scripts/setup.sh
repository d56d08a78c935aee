#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh Debian machine: the project venv and a Docker engine
# with a local registry (host networking only; see .ci/docker-up.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# The venv runs the newest Python 3 the machine has from 3.13 down (python3 otherwise, >= 3.11): on
# 3.12+ coverage measures through sys.monitoring (scripts/test.sh), a third less CPU than the C tracer
# on the offline tier (docs/benchmarks.md). An existing .venv is kept; `rm -rf .venv` to remake it.
if [ ! -x .venv/bin/python ]; then
    pyenv_versions="${PYENV_ROOT:-$HOME/.pyenv}/versions"  # pyenv's shims answer only for its global version
    for python in python3.13 "$pyenv_versions"/3.13*/bin/python3 python3.12 "$pyenv_versions"/3.12*/bin/python3 python3; do
        if command -v "$python" >/dev/null 2>&1 && "$python" -c 'import sys, venv; assert sys.version_info >= (3, 11)' 2>/dev/null; then
            "$python" -m venv .venv
            break
        fi
    done
    [ -x .venv/bin/python ] || { echo "setup: no Python >= 3.11 with its venv module (python3.13, python3.12, python3); fix: apt-get install python3-venv" >&2; exit 1; }
fi
# The venv's install runs beside the system packages and the engine's start below (both mostly
# downloads and unpacking); its exit status is collected before this script ends.
pip_pid=""
if ! .venv/bin/python -c 'import builder, isal, hypothesis, dockerfile, selenium, jsonschema, xdist, cyclonedx, radon; from builder.fit.cuobjdump import find_binary; find_binary(); import importlib.metadata as m; m.version("types-docker")' 2>/dev/null || [ ! -x .venv/bin/actionlint ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' &
    pip_pid=$!
fi
if ! command -v ssh-keygen >/dev/null 2>&1; then  # OpenSSH signs and verifies the published evidence (ssh-keygen -Y)
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client >/dev/null
fi
# linux/arm64 images are built and smoke-tested here under qemu-user emulation: Debian's static
# qemu and its aarch64 binfmt_misc handler, registered with the F flag (the interpreter is opened at
# registration, so it works inside containers). The package registers it only through binfmt-support
# outside a container, so this registers the one handler itself. Nothing to do on an arm64 host.
# Where this cannot be done (no root), `builder build` of an arm64 image says so in one line.
case "$(uname -m)" in
aarch64 | arm64) ;;
*)
    binfmt=/proc/sys/fs/binfmt_misc
    if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
    if [ ! -x /usr/bin/qemu-aarch64-static ]; then
        "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
    fi
    if [ ! -e "$binfmt/status" ]; then
        "${SUDO[@]}" mount -t binfmt_misc binfmt_misc "$binfmt" || echo "setup: cannot mount $binfmt: arm64 images cannot be built here" >&2
    fi
    if [ -e "$binfmt/register" ] && [ ! -e "$binfmt/qemu-aarch64" ]; then
        "${SUDO[@]}" sh -c "cat /usr/lib/binfmt.d/qemu-aarch64.conf > $binfmt/register" ||
            echo "setup: cannot register qemu-aarch64 in $binfmt: arm64 images cannot be built here" >&2
    fi
    ;;
esac
bash .ci/docker-up.sh
if [ -n "$pip_pid" ]; then
    wait "$pip_pid" || { echo "setup: installing the project's venv (pip install -e '.[dev]') failed" >&2; exit 1; }
fi
