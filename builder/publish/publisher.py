"""Push a tested image and build its known-good record: the immutable tag and the floating tags
of its line, the digest as the registry reports it, the package manifest read from the image,
and what the smoke tests measured inside it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from builder.catalog.records import KnownGood
from builder.engine import client as engine
from builder.engine import push
from builder.errors import RunFailure, UserError
from builder.host.facts import HostInfo
from builder.publish.tags import floating_tags, newest_of_line
from builder.records import ImageSpec
from builder.smoke.args import gpu_access, run_kwargs

REPOSITORY = re.compile(r"^(?:[a-z0-9.-]+(?::\d{1,5})?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
MANIFEST_ENV = re.compile(r"^(PATH|VIRTUAL_ENV|LD_LIBRARY_PATH|NVIDIA_[A-Z_]+|CUDA_[A-Z_]+|PYTHON[A-Z_]*|NUMBA_[A-Z_]+|HSA_[A-Z_]+)=")
MANIFEST_SCRIPT = (
    "set -e; echo '## pip freeze'; python -m pip freeze --all --disable-pip-version-check 2>/dev/null; "
    "echo '## dpkg'; dpkg-query -W -f '${Package} ${Version}\\n'; echo '## environment'; env | sort"
)


def check_repository(value: str) -> str:
    """A registry repository (host[:port]/path), lower case, no tag or digest."""
    if not REPOSITORY.match(value) or len(value) > 255:
        raise UserError(f"--registry {value!r} is not a repository like 127.0.0.1:5000/gpu-images or ghcr.io/org/images (no tag, no digest)")
    return value


def builder_version() -> str:
    try:
        return importlib.metadata.version("gpu-image-builder")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def measured(spec: ImageSpec, result: dict[str, Any]) -> dict[str, Any]:
    """What the smoke tests found inside the image: framework versions, Python, CUDA/cuDNN/ROCm, libraries."""
    probe = result.get("probe") or {}
    frameworks = {}
    builds: dict[str, Any] = {}
    for name in spec.versions:
        found = (probe.get("frameworks") or {}).get(name) or {}
        frameworks[name] = str(found.get("version") or spec.versions[name]).split("+")[0]
        builds[name] = found
    libraries = {c["name"]: str(c["found"]) for c in (probe.get("cuda") or {}).get("checks", []) if c.get("ok") and c.get("found")}
    cuda = libraries.get("cuda-runtime") or next((str(b["cuda_build"]) for b in builds.values() if b.get("cuda_build")), None)
    torch_build = (builds.get("torch") or {}).get("build") or {}
    cudnn = libraries.get("cudnn") or (str(torch_build["cudnn"]) if torch_build.get("cudnn") else None)
    rocm = str(torch_build["hip"]) if torch_build.get("hip") else None
    accelerator = {"kind": spec.base.vendor, "version": spec.accelerator.version, "cuda": cuda, "cudnn": cudnn, "rocm": rocm}
    if spec.base.vendor == "cpu":
        accelerator = {"kind": "cpu", "version": None, "cuda": None, "cudnn": None, "rocm": None}
    python = str((probe.get("host") or {}).get("python") or spec.python)
    return {"frameworks": frameworks, "python": python, "accelerator": accelerator, "libraries": libraries}


def base_identity(client: Any, spec: ImageSpec) -> dict[str, Any]:
    info = client.api.inspect_image(spec.base.from_ref)
    digests = [d for d in info.get("RepoDigests") or [] if "@sha256:" in d]
    return {"name": spec.base.name, "ref": spec.base.from_ref, "id": str(info["Id"]), "digest": digests[0] if digests else None}


def lock_sha256(spec: ImageSpec) -> str | None:
    return hashlib.sha256(spec.lock.text.encode()).hexdigest() if spec.lock else None


def read_manifest(client: Any, spec: ImageSpec, host: HostInfo, digest: str) -> str:
    """pip freeze, the dpkg list and the key environment, read in a locked-down container."""
    kwargs = run_kwargs(spec, gpu_access(spec, "off", host), host, 120)
    kwargs.update(command=["timeout", "-s", "KILL", "120", "sh", "-c", MANIFEST_SCRIPT], detach=True)
    with engine.tracked_container(client, **kwargs) as container:
        container.start()
        status = container.wait(timeout=180)
        output = container.logs(stdout=True, stderr=False).decode(errors="replace")
    if status.get("StatusCode") != 0:
        raise RunFailure(f"reading the package manifest of {spec.id} failed (exit {status.get('StatusCode')})")
    lines, section = [], ""
    for line in output.splitlines():
        section = line if line.startswith("## ") else section
        if section == "## environment" and not line.startswith("## ") and not MANIFEST_ENV.match(line):
            continue
        lines.append(line)
    return f"# {spec.id}\n# {digest}\n" + "\n".join(lines) + "\n"


def registry_digest(client: Any, reference: str) -> str:
    """The manifest digest the registry reports for a tag (asked through the engine)."""
    try:
        return str(client.api.inspect_distribution(reference)["Descriptor"]["digest"])
    except Exception as exc:  # noqa: BLE001 - said in one line with the reference
        raise RunFailure(f"the registry did not report a digest for {reference}: {' '.join(str(exc).split())[:200]}") from None


def push_as(client: Any, spec: ImageSpec, repository: str, tag: str, log: Callable[[str], None]) -> str:
    """Tag spec's image as repository:tag and push it. A push that fails takes its tag back: the
    engine keeps no tag for an image the registry never got (a tag that named another image
    before names it again)."""
    target = f"{repository}:{tag}"
    before = engine.image_id(client, target)
    client.api.tag(spec.tag, repository, tag=tag)
    try:
        return push.push_image(client, target, log=log)
    except BaseException:
        if before is None:
            engine.remove_image_quietly(client, target)  # an untag: the image stays under spec.tag
        else:
            client.api.tag(before, repository, tag=tag)
        raise


def publish_one(
    client: Any, spec: ImageSpec, result: dict[str, Any], repository: str, known: Sequence[KnownGood], host: HostInfo, accepted: bool, log: Callable[[str], None]
) -> tuple[KnownGood, str]:
    """Push spec's image as repository:<id>, move the floating tags this image is the newest of,
    and return its record and manifest. Raises RunFailure (nothing recorded) on any failure."""
    pushed = push_as(client, spec, repository, spec.id, log)
    digest = registry_digest(client, f"{repository}:{spec.id}")
    if digest != pushed:
        raise RunFailure(f"push of {repository}:{spec.id} reported {pushed} but the registry reports {digest}")
    facts = measured(spec, result)
    info = client.api.inspect_image(spec.tag)
    record = KnownGood(
        id=spec.id,
        tag=f"{repository}:{spec.id}",
        digest=f"{repository}@{digest}",
        floating=(),
        content_hash=spec.content_hash,
        stack=spec.stack,
        os=spec.base.os,
        base=base_identity(client, spec),
        lock_sha256=lock_sha256(spec),
        frameworks=facts["frameworks"],
        accelerator=facts["accelerator"],
        python=facts["python"],
        libraries=facts["libraries"],
        verdict=str(result["verdict"]),
        gpu_skipped_accepted=result["verdict"] == "gpu-skipped" and accepted,
        tests={k: int(v) for k, v in (result.get("tests") or {}).items()},
        host=dict(result.get("host") or {}),
        tested=str(result.get("date") or ""),
        published=now(),
        builder_version=builder_version(),
        size_mb=round(int(info.get("Size") or 0) / 1e6, 1),
        manifest=f"manifests/{spec.id}.txt",
        notes=tuple(note for i in spec.installs for note in i.notes) + (("published without a GPU run: its verdict is gpu-skipped",) if result["verdict"] == "gpu-skipped" else ()),
    )
    moved = []
    others = [r for r in known if r.id != spec.id]
    for line in floating_tags(spec.id):
        if newest_of_line(line, [*others, record]) is record:
            push_as(client, spec, repository, line, log)
            moved.append(f"{repository}:{line}")
    record = replace(record, floating=tuple(moved))
    return record, read_manifest(client, spec, host, record.digest)
