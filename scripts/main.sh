#!/usr/bin/env bash
# The main job on the embedded matrix's default selection: bootstrap the local bases, build the
# images, smoke-test them in locked-down containers, publish the ones that passed to the local
# registry (recorded in catalog/known-good.json), write the support matrix, and print the line a
# teammate runs to get the same digest. Extra args go to `builder run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
REGISTRY="${BUILDER_PUBLISH_REGISTRY:-127.0.0.1:5000/gpu-images}"
.venv/bin/builder run "$@"
# Evidence: every published digest gets an SBOM and an attestation, signed with $BUILDER_SIGN_KEY
# (a CI secret written to a file), or for the demo registry with a key made once into build/ (never
# committed; the private key stays there and enters no image or build context). Its allowed_signers
# goes beside it, unless $BUILDER_ALLOWED_SIGNERS names the team's (catalog/allowed_signers by default).
if [ -z "${BUILDER_SIGN_KEY:-}" ]; then
    export BUILDER_SIGN_KEY=build/demo-signing/key
    if [ ! -f "$BUILDER_SIGN_KEY" ]; then
        mkdir -p build/demo-signing && chmod 700 build/demo-signing
        ssh-keygen -q -t ed25519 -N '' -C demo@gpu-image-builder -f "$BUILDER_SIGN_KEY"
    fi
    export BUILDER_ALLOWED_SIGNERS="${BUILDER_ALLOWED_SIGNERS:-build/demo-signing/allowed_signers}"
    echo "demo@gpu-image-builder $(cut -d' ' -f1,2 "$BUILDER_SIGN_KEY.pub")" > "$BUILDER_ALLOWED_SIGNERS"
fi
.venv/bin/builder publish --registry "$REGISTRY" --sign-key "$BUILDER_SIGN_KEY"
.venv/bin/builder report
.venv/bin/builder catalog --verify    # signatures against the allowed signers, digests against the registry
echo "a teammate gets the same image, by digest (its signatures checked): BUILDER_ALLOWED_SIGNERS=${BUILDER_ALLOWED_SIGNERS:-catalog/allowed_signers} .venv/bin/builder pull torch=2.13 python=3.11"
