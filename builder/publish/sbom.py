"""The CycloneDX SBOM of a published image (CycloneDX's Python library, JSON, spec 1.6), checked
against CycloneDX's JSON schema before it is stored, and compared with the image's lock.

Components: every Python distribution in the image's venv (name, version, `pkg:pypi` purl and the
sha256 digests the lock allowed for that pin: `uv pip install --require-hashes` (or pip's) installed
a file with one of them), and every Debian package dpkg lists (`pkg:deb` purl with its architecture). The
image is the BOM's subject (metadata.component, type container, version = its registry digest).
The venv's own installer (pip, and setuptools on Python <= 3.11), put there by `python -m venv`
(or by uv, from the same ensurepip wheels of the base) and not by the lock, is listed with the property `builder:source=venv` and is the only
difference from the lock that is allowed; any other difference refuses the publish.

Pure: no engine, no files; the same inventory gives the same bytes (the serial number is derived
from the digest, the timestamp is the publish date)."""

from __future__ import annotations

import functools
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL
from packaging.version import Version

from builder.model.plan import Lock
from builder.publish.inventory import Inventory
from builder.util.errors import RunFailure
from builder.util.fsio import parse_json

SPEC_VERSION = SchemaVersion.V1_6
VENV_TOOLS = ("pip", "setuptools")  # what `python -m venv` installs (ensurepip), outside the lock
SOURCE = "builder:source"  # a component property: lock | venv | dpkg
NAMESPACE = uuid.UUID("3f0b7c55-2a55-4c7e-9d5e-6b1c1f0e2d11")  # serial numbers: uuid5(NAMESPACE, digest)


@dataclass(frozen=True)
class LockPin:
    name: str
    version: str
    hashes: tuple[str, ...]


def lock_pins(lock: Lock | None) -> dict[str, LockPin]:
    """The lock's pins by normalised name (empty for an unlocked image)."""
    if lock is None:
        return {}
    hashes = dict(lock.hashes)
    return {name: LockPin(name, version, tuple(hashes.get(name, ()))) for name, version in lock.pins}


def differences(inventory: Inventory, pins: dict[str, LockPin]) -> list[str]:
    """How the image's Python set differs from the lock's (the venv's installer aside), one phrase each."""
    found = {d.name: d.version for d in inventory.python if not (d.name in VENV_TOOLS and d.name not in pins)}
    out = [f"{name} {found[name]} is in the image but not in the lock" for name in sorted(set(found) - set(pins))]
    out += [f"{name}=={pins[name].version} is in the lock but not in the image" for name in sorted(set(pins) - set(found))]
    out += [
        f"{name} is {found[name]} in the image, {pins[name].version} in the lock"
        for name in sorted(set(found) & set(pins))
        if not _same_version(found[name], pins[name].version)
    ]
    return out


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
        return a == b


def check_equal_to_lock(inventory: Inventory, pins: dict[str, LockPin], image_id: str) -> None:
    """RunFailure (publish refuses) when the image's Python set is not the lock's."""
    if not pins:
        return
    diff = differences(inventory, pins)
    if diff:
        more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
        raise RunFailure(
            f"{image_id}: its SBOM differs from requirements.lock: {'; '.join(diff[:3])}{more}; rebuild it from the lock (builder build --force) and test it again"
        )


def make_sbom(image_id: str, repository: str, digest: str, inventory: Inventory, pins: dict[str, LockPin], created: str) -> str:
    """The SBOM's JSON text (validated against the CycloneDX 1.6 schema; RunFailure if it is not valid)."""
    bom = Bom(serial_number=uuid.uuid5(NAMESPACE, f"{repository}@{digest}"))
    bom.metadata.timestamp = datetime.fromisoformat(created.replace("Z", "+00:00"))
    subject = Component(
        name=f"{repository}:{image_id}",
        version=digest,
        type=ComponentType.CONTAINER,
        bom_ref="image",
        purl=PackageURL("oci", None, repository.rsplit("/", 1)[-1], digest, qualifiers={"repository_url": repository}),
    )
    bom.metadata.component = subject
    parts: list[Component] = []
    for dist in inventory.python:
        pin = pins.get(dist.name)
        source = "lock" if pin else ("venv" if dist.name in VENV_TOOLS else "image")
        parts.append(
            Component(
                name=dist.name,
                version=dist.version,
                type=ComponentType.LIBRARY,
                bom_ref=f"pypi:{dist.name}",
                purl=PackageURL("pypi", None, dist.name, dist.version),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in (pin.hashes if pin else ())],
                properties=[Property(name=SOURCE, value=source)],
            )
        )
    for deb in inventory.dpkg:
        parts.append(
            Component(
                name=deb.name,
                version=deb.version,
                type=ComponentType.LIBRARY,
                bom_ref=f"deb:{deb.name}:{deb.arch}",
                purl=PackageURL("deb", "debian", deb.name, deb.version, qualifiers={"arch": deb.arch}),
                properties=[Property(name=SOURCE, value="dpkg")],
            )
        )
    for part in parts:
        bom.components.add(part)
    bom.register_dependency(subject, parts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the library warns about an incomplete dependency graph: packages' own edges are not recorded
        text = JsonV1Dot6(bom).output_as_string(indent=2) + "\n"
    validate(text, image_id)
    return text


def validate(text: str, where: str) -> None:
    """RunFailure naming `where` unless `text` is valid CycloneDX 1.6 JSON (the library's strict validator).

    The validator is imported when first used, not at the top: it pulls in jsonschema's format checkers, ~2 s of
    import (rfc3987-syntax builds its grammar), which every `builder` command importing publish
    (nightly, catalog, pull) would pay on start even when it validates nothing."""
    error = _validator().validate_str(text)
    if error is not None:
        raise RunFailure(f"{where}: the SBOM is not valid CycloneDX {SPEC_VERSION.to_version()}: {str(error).splitlines()[0][:200]}")


@functools.cache
def _validator() -> Any:
    """One strict validator per process: making one loads and compiles the CycloneDX schema and the
    schemas it references (about a second), which a publish of many images paid per image."""
    from cyclonedx.validation.json import JsonStrictValidator

    return JsonStrictValidator(SPEC_VERSION)


def python_set(text: str) -> dict[str, str]:
    """name -> version of the `pkg:pypi` components of an SBOM (tests and `catalog --verify` read it back)."""
    doc = parse_json(text, "sbom")
    out: dict[str, str] = {}
    for item in doc.get("components", []) if isinstance(doc, dict) else []:
        purl = item.get("purl", "") if isinstance(item, dict) else ""
        if isinstance(purl, str) and purl.startswith("pkg:pypi/"):
            out[str(item["name"])] = str(item["version"])
    return out
