"""numba: Python range, the NumPy ceiling it enforces at import, numba-cuda on CUDA bases."""

from __future__ import annotations

from packaging.version import Version

from builder.compat import Compat, NumbaRelease
from builder.records import Base, Install, Verdict
from builder.rules._util import in_range, mm, span


def _release(version: str, compat: Compat) -> NumbaRelease | None:
    """The exact row, else the newest row of the same minor (0.68.1 behaves like 0.68.0)."""
    exact = next((r for r in compat.numba if r.version == version), None)
    if exact is not None:
        return exact
    same_minor = [r for r in compat.numba if mm(r.version) == mm(version) and Version(r.version) <= Version(version)]
    return same_minor[-1] if same_minor else None


def decide_numba(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    rel = _release(version, compat)
    if rel is None:
        return Verdict.no(
            f"numba {version} is not in the compatibility table, so its NumPy ceiling is unknown; "
            "add it (numba/__init__.py _ensure_critical_deps) to builder/data/compat.yaml"
        )
    if not in_range(python, rel.python):
        return Verdict.no(f"numba {version} supports Python {span(rel.python)}; this image has Python {python}")
    if base.vendor == "rocm":
        return Verdict.no("numba has no ROCm GPU target (its ROC target was removed); use a CUDA or cpu base")
    requirements: tuple[str, ...] = (f"numba=={version}",)
    numpy_max = rel.numpy[1]
    variant = "cpu"
    notes: tuple[str, ...] = ()
    if base.vendor == "cuda":
        assert base.version is not None
        nc = compat.numba_cuda
        major = str(mm(base.version)[0])
        extra = dict(nc.extras).get(major)
        if extra is None:
            return Verdict.no(
                f"numba-cuda {nc.version} supports CUDA {', '.join(k for k, _ in nc.extras)} only; base {base.name} is CUDA {major}"
            )
        if Version(version) < Version(nc.numba_min):
            return Verdict.no(f"numba-cuda {nc.version} needs numba >= {nc.numba_min}; this image pins numba {version}")
        requirements += (f"numba-cuda[{extra}]=={nc.version}",)
        if mm(nc.numpy_max) < mm(numpy_max):
            numpy_max = nc.numpy_max
            notes = (f"numpy <= {nc.numpy_max}: numba-cuda {nc.version} fails to import on NumPy 2.5 (np.row_stack)",)
        variant = extra
    install = Install("numba", version, requirements, variant=variant, numpy_min=rel.numpy[0], numpy_max=numpy_max, notes=notes)
    return Verdict(ok=True, install=install)
