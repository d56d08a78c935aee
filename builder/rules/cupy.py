"""cupy: cupy-cuda11x/12x/13x by CUDA major and release; no ROCm 6 wheels exist."""

from __future__ import annotations

from builder.compat import Compat
from builder.records import Base, Install, Verdict
from builder.rules._util import in_range, mm, newest_at_or_below, span


def decide_cupy(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    if base.vendor == "cpu":
        return Verdict.no("cupy is a GPU array library with no CPU build; use a CUDA base")
    if base.vendor == "rocm":
        return Verdict.no(compat.cupy_rocm_note)
    assert base.version is not None
    i = newest_at_or_below(version, [row.release for row in compat.cupy])
    if i is None:
        return Verdict.no(f"cupy {version} predates the table (from {compat.cupy[0].release}); use a newer cupy")
    row = compat.cupy[i]
    if mm(version)[0] != mm(row.release)[0]:
        return Verdict.no(f"cupy {version} is not in the compatibility table; add its row to builder/data/compat.yaml")
    if not in_range(python, row.python):
        return Verdict.no(f"cupy {version} supports Python {span(row.python)}; this image has Python {python}")
    major = str(mm(base.version)[0])
    package = dict(row.packages).get(major)
    if package is None:
        have = ", ".join(p for _, p in row.packages)
        return Verdict.no(f"cupy {version} ships {have}, nothing for CUDA {major}; base {base.name} is CUDA {base.version}")
    if not in_range(base.version, row.cuda):
        return Verdict.no(f"cupy {version} supports CUDA {span(row.cuda)}; base {base.name} is CUDA {base.version}")
    install = Install(
        "cupy",
        version,
        (f"{package}=={version}",),
        variant=package.removeprefix("cupy-"),
        built_cuda=major,
        numpy_min=row.numpy[0],
        numpy_max=row.numpy[1],
    )
    return Verdict(ok=True, install=install)
