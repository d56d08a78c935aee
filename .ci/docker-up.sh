#!/usr/bin/env bash
# Bring up a Docker engine and a local OCI registry on this machine, idempotently.
# Host networking only: no bridge, no iptables, no masquerading (see ../shared/ENVIRONMENT.md).
# Leaves both running; safe to call again (it only starts what is not answering).
set -euo pipefail

REGISTRY_ADDR="127.0.0.1:5000"
REGISTRY_ROOT="${BUILDER_REGISTRY_ROOT:-/tmp/builder-registry}"
REGISTRY_CONFIG="${BUILDER_REGISTRY_CONFIG:-/tmp/builder-registry.yml}"
DOCKERD_LOG=/tmp/dockerd.log
REGISTRY_LOG=/tmp/docker-registry.log
WAIT_S="${BUILDER_DOCKER_WAIT_S:-60}"

# The daemons started here must not inherit a descriptor of whoever called this script: under
# `flock LOCK bash .ci/docker-up.sh`, dockerd kept the lock for as long as it ran.
for fd in /proc/$$/fd/*; do
    fd="${fd##*/}"
    case "$fd" in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
done

say() { printf 'docker-up: %s\n' "$*"; }
die() { printf 'docker-up: error: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi

apt_updated=0
ensure_packages() {
    # $@: pairs of "command:package"
    local missing=() pair cmd pkg
    for pair in "$@"; do
        cmd="${pair%%:*}"; pkg="${pair#*:}"
        if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ] && [ ! -x "/usr/bin/$cmd" ]; then
            missing+=("$pkg")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        "${SUDO[@]}" apt-get update -qq
        apt_updated=1
    fi
    say "installing ${missing[*]}"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

engine_answers() { docker info >/dev/null 2>&1; }
registry_answers() { curl -fsS --max-time 2 "http://${REGISTRY_ADDR}/v2/" >/dev/null 2>&1; }

wait_for() {  # wait_for WHAT CHECK LOG
    local what="$1" check="$2" log="$3" i
    for ((i = 0; i < WAIT_S * 2; i++)); do
        if "$check"; then return 0; fi
        sleep 0.5
    done
    tail -n 30 "$log" >&2 || true
    die "$what did not answer within ${WAIT_S}s (log: $log)"
}

# The probe's unit tests compile stand-in CUDA libraries (tests/test_probe.py) with a C compiler;
# the report's browser test drives Debian's chromium through chromedriver (tests/test_report_browser.py).
# tests/integration/test_offload_real.py holds the AMD code-object reader equal to LLVM's clang-offload-bundler.
ensure_packages cc:gcc chromium:chromium chromedriver:chromium-driver clang-offload-bundler-14:clang-tools-14

# --- engine ---------------------------------------------------------------------------------
if engine_answers; then
    say "engine already answering"
else
    # dockerd comes from docker.io; curl is needed for the registry check below.
    ensure_packages dockerd:docker.io mmdebstrap:mmdebstrap docker-registry:docker-registry curl:curl
    say "starting dockerd (--bridge=none --iptables=false --ip-masq=false), log $DOCKERD_LOG"
    "${SUDO[@]}" setsid dockerd --bridge=none --iptables=false --ip-masq=false >"$DOCKERD_LOG" 2>&1 < /dev/null &
    wait_for "dockerd" engine_answers "$DOCKERD_LOG"
    say "engine up: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
fi
# mmdebstrap and the registry may be missing even when an engine already runs.
ensure_packages mmdebstrap:mmdebstrap arch-test:arch-test docker-registry:docker-registry curl:curl
# BuildKit's client for `builder bake` and `docker buildx bake`: Debian 13's docker-buildx, pinned
# (version and .deb sha256) in .ci/buildx.sh. Once it is installed the docker CLI's `docker build`
# uses BuildKit too (DOCKER_BUILDKIT=0 for the classic builder); the SDK's builds stay classic.
bash "$(dirname "$0")/buildx.sh"

# --- registry -------------------------------------------------------------------------------
if registry_answers; then
    say "registry already answering on $REGISTRY_ADDR"
else
    registry_bin="$(command -v docker-registry || true)"
    [ -z "$registry_bin" ] && [ -x /usr/bin/docker-registry ] && registry_bin=/usr/bin/docker-registry
    [ -n "$registry_bin" ] || die "docker-registry not found after installing the docker-registry package"
    mkdir -p "$REGISTRY_ROOT"
    cat >"$REGISTRY_CONFIG" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${REGISTRY_ROOT}
  delete:
    enabled: true
http:
  addr: ${REGISTRY_ADDR}
YAML
    say "starting $registry_bin on $REGISTRY_ADDR (config $REGISTRY_CONFIG, log $REGISTRY_LOG)"
    setsid "$registry_bin" serve "$REGISTRY_CONFIG" >"$REGISTRY_LOG" 2>&1 < /dev/null &
    wait_for "docker-registry" registry_answers "$REGISTRY_LOG"
    say "registry up on $REGISTRY_ADDR"
fi

# --- the test suite's second engine (BUILDER_SECOND_ENGINE=1, set by scripts/test.sh) -----------
# The integration tier runs in two lanes, one per pytest worker, each against its own engine
# (tests/conftest.py): a lane's tests count, clean and remove what is on *their* engine, so the
# other lane's builds never show up in them. The second engine is a second dockerd with its own
# data root, exec root (and so its own containerd) and socket, and its containers their own cgroup parent
# (the suite's CPU table tells the lanes' containers apart: tests/cpu_meter.py); it shares the registry.
ENGINE2_ROOT="${BUILDER_ENGINE2_ROOT:-/var/lib/builder-engine2}"
ENGINE2_RUN=/run/builder-engine2
ENGINE2_HOST="unix://${ENGINE2_RUN}/docker.sock"
ENGINE2_LOG=/tmp/dockerd-engine2.log
engine2_answers() { DOCKER_HOST="$ENGINE2_HOST" docker info >/dev/null 2>&1; }
if [ "${BUILDER_SECOND_ENGINE:-0}" = 1 ]; then
    if engine2_answers; then
        say "second engine already answering on $ENGINE2_HOST"
    else
        "${SUDO[@]}" mkdir -p "$ENGINE2_ROOT" "$ENGINE2_RUN"
        say "starting the second dockerd on $ENGINE2_HOST (data root $ENGINE2_ROOT), log $ENGINE2_LOG"
        "${SUDO[@]}" setsid dockerd --bridge=none --iptables=false --ip-masq=false --data-root "$ENGINE2_ROOT" \
            --exec-root "$ENGINE2_RUN" --pidfile "$ENGINE2_RUN/docker.pid" -H "$ENGINE2_HOST" --cgroup-parent builder-engine2 \
            >"$ENGINE2_LOG" 2>&1 < /dev/null &
        wait_for "the second dockerd" engine2_answers "$ENGINE2_LOG"
    fi
fi
say "ready"
