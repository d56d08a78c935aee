#!/usr/bin/env bash
# Install Docker's buildx CLI plugin (BuildKit's client: `docker buildx bake`) from Debian 13's
# docker-buildx package, pinned by version and by the sha256 of its .deb, on a Debian 12 host:
# Debian 12 has no docker-buildx, and Debian 13's (a static Go binary; Depends: libc6 >= 2.34)
# runs on Debian 12 against its dockerd 20.10 (the embedded BuildKit, driver `docker`). The .deb
# is fetched from the Debian mirror's pool and installed with apt, so dpkg owns the plugin
# (`apt-get remove docker-buildx` takes it away); the host's apt sources are not changed.
# Idempotent: nothing is fetched when the pinned version answers `docker buildx version`.
# docs/reproducible.md ("bake") says what it is for.
set -euo pipefail

VERSION="0.13.1+ds1-3"
MIRROR="${BUILDER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
say() { printf 'buildx: %s\n' "$*"; }
die() { printf 'buildx: error: %s\n' "$*" >&2; exit 1; }

arch="$(dpkg --print-architecture 2>/dev/null || true)"
case "$arch" in
amd64) SHA256=fcf8c48204d1603c8f209451d7827eb91bf30759578baf7704e9e1a87e5f1d7f ;;
arm64) SHA256=6cf361ab892b55753b728adcbd1a99f0616711df853dba64a5297a4a676d96b0 ;;
*) die "no pinned docker-buildx for architecture '${arch:-unknown}' (amd64 and arm64 are pinned in .ci/buildx.sh)" ;;
esac

installed="$(dpkg-query -W -f '${Version}' docker-buildx 2>/dev/null || true)"
if [ "$installed" = "$VERSION" ] && docker buildx version >/dev/null 2>&1; then
    say "docker-buildx $VERSION already installed"
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
deb="docker-buildx_${VERSION//+/%2B}_${arch}.deb"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
file="$tmp/docker-buildx_${VERSION}_${arch}.deb"
say "fetching $MIRROR/pool/main/d/docker-buildx/$deb"
curl -fsS --retry 3 --max-time 300 -o "$file" "$MIRROR/pool/main/d/docker-buildx/$deb" ||
    die "cannot fetch docker-buildx $VERSION from $MIRROR (set BUILDER_DEBIAN_MIRROR to a Debian mirror that has trixie's pool)"
echo "$SHA256  $file" | sha256sum -c --quiet - >/dev/null 2>&1 ||
    die "docker-buildx_${VERSION}_${arch}.deb from $MIRROR has sha256 $(sha256sum "$file" | cut -c1-64), not the pinned $SHA256"
chmod 0644 "$file" && chmod 0755 "$tmp"  # apt's sandbox user reads it
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$file" >/dev/null
docker buildx version >/dev/null 2>&1 || die "docker-buildx $VERSION is installed but \`docker buildx version\` does not answer"
say "installed: $(docker buildx version)"
