"""A ROCm base's HIP checks, read from what probes/hip_base.py printed in its smoke container.

The base carries no framework, so its smoke test is its HIP user space up to the device call: the
HIP runtime and rocBLAS load, hiprtc compiles a small kernel for each of TARGETS and the code object
it returns holds that target (read here with fit/offload.py, the reader of every AMD fit), and
hipGetDeviceCount reports no device. The container is given no GPU, so the best verdict is
`gpu-skipped`, never `passed`: nothing ran on a device. Pure apart from the code objects written to
a temporary folder for the reader; the engine is the runner's (smoke/base.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from builder.fit import offload
from builder.model import jsonfields as jf
from builder.model.amd_fit import AmdFit, AmdLibrary
from builder.model.results import HipCheck, Verdict
from builder.util.errors import RunFailure

# One of each AMD GPU family hiprtc is asked to compile for: CDNA2 (MI200), CDNA3 (MI300), RDNA3 (RX 7900).
TARGETS = ("gfx90a", "gfx942", "gfx1100")
NO_DEVICE = 100  # hipErrorNoDevice (hip_runtime_api.h): what HIP answers where it finds no /dev/kfd
DEVICE_CHECK = "hip-device-count"
CONFINED_CHECK = "locked-down"
PROBE_SCHEMA = 1

ReadCode = Callable[[bytes], list[str]]  # a code object's bytes -> the target IDs it holds (offload.read)


def read_code(data: bytes) -> list[str]:
    """The targets of one code object, read by fit/offload.py from a temporary file."""
    with tempfile.TemporaryDirectory(prefix="builder-hiprtc-") as folder:
        path = Path(folder) / "kernel.co"
        path.write_bytes(data)
        return offload.read(str(path))


def _fail(what: str) -> RunFailure:
    return RunFailure(f"the HIP probe's output is not what probes/hip_base.py prints: {what}")


def parse(output: str, targets: tuple[str, ...] = TARGETS, reader: ReadCode = read_code) -> tuple[HipCheck, ...]:
    """The checks of one probe run: its own (loads, compiles), each compiled code object's targets
    checked against the one asked for, and the device call's answer."""
    try:
        doc = jf.obj(json.loads(output), "the output", _fail)
    except json.JSONDecodeError as exc:
        raise _fail(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if doc.get("schema") != PROBE_SCHEMA:
        raise _fail(f"schema {jf.clip(doc.get('schema'))}, not {PROBE_SCHEMA}")
    code = jf.text_map(doc.get("code_objects"), "code_objects", _fail)
    checks = []
    for item in jf.objs(doc.get("checks"), "checks", _fail):
        found = HipCheck(jf.text(item.get("name"), "checks.name", _fail), jf.flag(item.get("ok"), "checks.ok", _fail))
        detail = jf.text(item.get("detail", ""), "checks.detail", _fail)
        target = found.name.removeprefix("hiprtc ")
        if found.ok and target in targets:
            checks.append(code_object_check(found.name, target, code.get(target), detail, reader))
        else:
            checks.append(HipCheck(found.name, found.ok, detail))
    asked = {f"hiprtc {t}" for t in targets}
    missing = sorted(asked - {c.name for c in checks})
    checks += [HipCheck(name, False, "the probe did not try it") for name in missing]
    devices = doc.get("devices")
    checks.append(device_check(None if devices is None else jf.obj(devices, "devices", _fail)))
    checks.append(confinement_check(jf.obj(doc.get("confinement"), "confinement", _fail)))
    return tuple(checks)


def code_object_check(name: str, target: str, encoded: str | None, compiled: str, reader: ReadCode) -> HipCheck:
    """A compile that worked passes only when the code object it returned holds the target asked for."""
    if encoded is None:
        return HipCheck(name, False, f"{compiled}, but the probe returned no code object")
    try:
        held = reader(base64.b64decode(encoded, validate=True))
    except (binascii.Error, offload.NotCode, offload.Bounded) as exc:
        return HipCheck(name, False, f"{compiled}, but the code object is unreadable: {exc}")
    processors = {t.split(":")[0] for t in held}
    if target not in processors:
        return HipCheck(name, False, f"{compiled}, but the code object holds {' '.join(held) or 'no target'}, not {target}")
    return HipCheck(name, True, f"{compiled}, holding {' '.join(held)}")


def device_check(devices: Mapping[str, Any] | None) -> HipCheck:
    """hipGetDeviceCount in a container given no GPU: no device (hipErrorNoDevice, or success with 0)."""
    if devices is None:
        return HipCheck(DEVICE_CHECK, False, "not asked: the HIP runtime did not load")
    error = jf.whole(devices.get("error"), "devices.error", _fail)
    count = jf.whole(devices.get("count"), "devices.count", _fail)
    name = jf.text(devices.get("name"), "devices.name", _fail)
    said = f"hipGetDeviceCount returned {name} ({error})"
    if error == NO_DEVICE or (error == 0 and count == 0):
        return HipCheck(DEVICE_CHECK, True, f"{said}: no device, as in a container given none")
    if error == 0:
        return HipCheck(DEVICE_CHECK, False, f"{said} with {count} device(s) in a container given no GPU")
    return HipCheck(DEVICE_CHECK, False, f"{said}, not hipErrorNoDevice")


def confinement_check(seen: Mapping[str, Any]) -> HipCheck:
    """The checks ran as a user other than root and saw no network but loopback, as every smoke container."""
    uid = jf.whole(seen.get("uid"), "confinement.uid", _fail)
    interfaces = jf.texts(seen.get("interfaces"), "confinement.interfaces", _fail)
    said = f"ran as uid {uid}, network interfaces: {' '.join(interfaces) or 'none'}"
    return HipCheck(CONFINED_CHECK, uid != 0 and set(interfaces) <= {"lo"}, said)


def verdict(checks: tuple[HipCheck, ...]) -> Verdict:
    """Every check passed: `gpu-skipped` (nothing ran on a device, so never `passed`); else `failed`."""
    return "gpu-skipped" if checks and all(c.ok for c in checks) else "failed"


def amd_fit(scan_output: str, rocm: str | None) -> AmdFit:
    """The base's measured AMD fit from offload.scan's JSON over its library folder (absolute paths)."""
    try:
        doc = jf.obj(json.loads(scan_output), "the output", _fail)
    except json.JSONDecodeError as exc:
        raise _fail(f"the code object scan's output is not JSON ({exc.msg})") from None
    libraries = []
    for item in jf.objs(doc.get("libraries"), "libraries", _fail):
        root, path = jf.text(item.get("root"), "root", _fail), jf.text(item.get("path"), "path", _fail)
        rows = item.get("targets")
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 2 and type(r[1]) is int for r in rows):
            raise _fail(f"the targets of {path[:80]} are not [target, count] rows")
        libraries.append(AmdLibrary(f"{root.rstrip('/')}/{path}", tuple(sorted((str(t), n) for t, n in rows))))
    return AmdFit(reader="offload", rocm=rocm, libraries=tuple(libraries))
