#!/usr/bin/env python3
"""hip-base: the HIP checks of a ROCm base that carries no framework, up to the device call.

Stdlib only and a single file: builder/smoke/base.py runs its text with the base's own Python
(`python3 -I -c`) in the locked-down smoke container (non-root, no network, no device nodes).
It loads the HIP runtime and rocBLAS (ctypes), compiles one small kernel with hiprtc for each
target named on its command line, and asks hipGetDeviceCount. It prints one JSON object; what the
code objects hold is read on the host (builder/fit/offload.py), and the verdict is made there
(builder/smoke/hip.py): a container given no GPU can never pass, only be gpu-skipped.

    python3 -I -c "$(cat hip_base.py)" gfx90a gfx942 gfx1100
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import sys
from typing import Any

SCHEMA = 1
HIP = "libamdhip64.so.5"
# Where hiprtc is looked for: ROCm 5's HIP runtime holds it (Debian 13's libamdhip64-5 ships no libhiprtc.so;
# ROCm 6 split it into libhiprtc.so.6, beside libamdhip64.so.6)
HIPRTC = (HIP,)
ROCBLAS = "librocblas.so.0"
KERNEL = 'extern "C" __global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }\n'
MAX_CODE = 8 << 20  # one small kernel's code object is a few KB
MAX_LOG = 4000


def check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail[:MAX_LOG]}


def load(soname: str) -> tuple[Any, str]:
    """The library, or None and why (the loader's one line)."""
    try:
        return ctypes.CDLL(soname), ""
    except OSError as exc:
        return None, str(exc)


def load_hiprtc() -> tuple[Any, str]:
    """The first library of HIPRTC that exports hiprtcCompileProgram, or None and why."""
    whys = []
    for soname in HIPRTC:
        lib, why = load(soname)
        if lib is not None and hasattr(lib, "hiprtcCompileProgram"):
            return lib, ""
        whys.append(why or f"{soname} has no hiprtcCompileProgram")
    return None, "; ".join(whys)


def hip_runtime(hip: Any) -> dict[str, Any]:
    version = ctypes.c_int(0)
    err = hip.hipRuntimeGetVersion(ctypes.byref(version))
    if err != 0:
        return check("hip-runtime", False, f"{HIP} loaded; hipRuntimeGetVersion returned {err}")
    return check("hip-runtime", True, f"{HIP} loaded; HIP runtime version {version.value}")


def rocblas(lib: Any) -> dict[str, Any]:
    size = ctypes.c_size_t(0)
    if lib.rocblas_get_version_string_size(ctypes.byref(size)) != 0 or not 0 < size.value < 4096:
        return check("rocblas", False, f"{ROCBLAS} loaded; rocblas_get_version_string_size failed")
    buf = ctypes.create_string_buffer(size.value)
    lib.rocblas_get_version_string(buf, ctypes.c_size_t(size.value))
    return check("rocblas", True, f"{ROCBLAS} loaded; rocBLAS {buf.value.decode(errors='replace')}")


def _log(rtc: Any, prog: Any) -> str:
    size = ctypes.c_size_t(0)
    if rtc.hiprtcGetProgramLogSize(prog, ctypes.byref(size)) != 0 or not 0 < size.value < 1 << 20:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    rtc.hiprtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace").strip()


def compile_for(rtc: Any, target: str) -> tuple[dict[str, Any], str]:
    """hiprtc's code object of KERNEL for one target (base64), with the check that says how it went."""
    prog = ctypes.c_void_p()
    err = rtc.hiprtcCreateProgram(ctypes.byref(prog), KERNEL.encode(), b"scale.hip", 0, None, None)
    if err != 0:
        return check(f"hiprtc {target}", False, f"hiprtcCreateProgram returned {err}"), ""
    try:
        options = (ctypes.c_char_p * 1)(f"--offload-arch={target}".encode())
        err = rtc.hiprtcCompileProgram(prog, 1, options)
        if err != 0:
            return check(f"hiprtc {target}", False, f"hiprtcCompileProgram returned {err}: {_log(rtc, prog)}"), ""
        size = ctypes.c_size_t(0)
        if rtc.hiprtcGetCodeSize(prog, ctypes.byref(size)) != 0 or not 0 < size.value <= MAX_CODE:
            return check(f"hiprtc {target}", False, f"hiprtcGetCodeSize gave {size.value} bytes"), ""
        code = ctypes.create_string_buffer(size.value)
        if rtc.hiprtcGetCode(prog, code) != 0:
            return check(f"hiprtc {target}", False, "hiprtcGetCode failed"), ""
        return check(f"hiprtc {target}", True, f"compiled: {size.value} bytes of code object"), base64.b64encode(code.raw).decode()
    finally:
        rtc.hiprtcDestroyProgram(ctypes.byref(prog))


def device_count(hip: Any) -> dict[str, Any]:
    """The device call: what hipGetDeviceCount answers (error code and name) in a container given no GPU."""
    count = ctypes.c_int(-1)
    err = hip.hipGetDeviceCount(ctypes.byref(count))
    hip.hipGetErrorName.restype = ctypes.c_char_p
    name = hip.hipGetErrorName(err) or b"?"
    return {"error": int(err), "name": name.decode(errors="replace"), "count": count.value}


def confinement() -> dict[str, Any]:
    """Who the checks ran as and which network interfaces they saw: the runner's lockdown, seen from inside."""
    try:
        interfaces = sorted(os.listdir("/sys/class/net"))
    except OSError:
        interfaces = []
    return {"uid": os.getuid(), "interfaces": interfaces}


def probe(targets: list[str]) -> dict[str, Any]:
    checks: list[dict[str, Any]] = []
    code: dict[str, str] = {}
    hip, why = load(HIP)
    checks.append(hip_runtime(hip) if hip is not None else check("hip-runtime", False, why))
    blas, why = load(ROCBLAS)
    checks.append(rocblas(blas) if blas is not None else check("rocblas", False, why))
    rtc, why = load_hiprtc()
    for target in targets:
        if rtc is None:
            checks.append(check(f"hiprtc {target}", False, why))
            continue
        found, text = compile_for(rtc, target)
        checks.append(found)
        if text:
            code[target] = text
    devices = device_count(hip) if hip is not None else None
    return {"schema": SCHEMA, "checks": checks, "code_objects": code, "devices": devices, "confinement": confinement()}


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1:]), sort_keys=True))
