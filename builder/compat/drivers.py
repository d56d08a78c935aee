"""Which driver branches drive which GPU generation (data/gpu_drivers.yaml), so a host that cannot exist
is refused rather than judged: `fit --gpu-cc 12.0 --driver 535` describes a Blackwell GPU on a branch
that predates Blackwell.

Pure: the table in, a refusal (one line, the fix in it) or None out. The loader refuses a broken table
in one line (file:line): a row without a source, an unsorted or repeated compute capability, a first
branch after its last, or a first branch that disagrees with the driver compat.yaml's Table 3 gives
the generation's first CUDA toolkit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from builder.compat.facts import Compat
from builder.compat.tables import DATA_DIR, Table
from builder.model.versions import cc_tuple, release_tuple

TABLE_PATH = DATA_DIR / "gpu_drivers.yaml"


@dataclass(frozen=True)
class Generation:
    ccs: tuple[str, ...]
    name: str
    cuda: str  # the first CUDA toolkit that supports it
    first: int  # the first driver branch that drives it
    last: int | None  # the last one; None: still driven by new branches


def load(compat: Compat, path: Path = TABLE_PATH) -> tuple[Generation, ...]:
    t = Table(path, "GPU driver table")
    t.only(t.doc, ("schema", "generations"), "the top level")
    rows = t.rows(t.section(t.doc, "generations"), ("cc", "generation", "cuda", "first"), None, t.doc.line, optional=("last",))
    shipped = dict(compat.cuda_toolkits)
    out: list[Generation] = []
    seen: list[tuple[int, int]] = []
    for row in rows:
        ccs = t.strs(row["cc"], row.line)
        for cc in ccs:
            try:
                key = cc_tuple(cc)
            except ValueError:
                raise t.fail(f"cc {cc!r} is not a compute capability like 8.6", row.line_of("cc")) from None
            if seen and key <= seen[-1]:
                raise t.fail(
                    f"cc {cc} must come after {'.'.join(map(str, seen[-1]))}: rows and their cc lists sorted, each once", row.line_of("cc")
                )
            seen.append(key)
        first, last = row["first"], row.get("last")
        if type(first) is not int or (last is not None and type(last) is not int):
            raise t.fail("first and last are driver branches, numbers like 570", row.line)
        if last is not None and last < first:
            raise t.fail(f"last branch R{last} is before the first, R{first}", row.line_of("last"))
        cuda = str(row["cuda"])
        t.version(cuda, row.line)
        driver = shipped.get(f"{cuda}.0")
        if driver is not None and release_tuple(driver)[0] != first:
            raise t.fail(
                f"first branch R{first} disagrees with compat.yaml: CUDA {cuda}.0 shipped with driver {driver}", row.line_of("first")
            )
        out.append(Generation(ccs, str(row["generation"]), cuda, first, last))
    return tuple(out)


@functools.cache
def _default(compat: Compat) -> tuple[Generation, ...]:
    return load(compat)


def generation(cc: str, compat: Compat, table: tuple[Generation, ...] | None = None) -> Generation | None:
    wanted = cc_tuple(cc)
    return next((g for g in (table if table is not None else _default(compat)) if wanted in {cc_tuple(c) for c in g.ccs}), None)


def impossible(ccs: tuple[str, ...], driver: str, compat: Compat, table: tuple[Generation, ...] | None = None) -> str | None:
    """Why no host has a GPU of one of `ccs` on `driver` (one line), or None when the table allows it."""
    release = release_tuple(driver)
    if not release:
        return None
    branch = release[0]
    for cc in ccs:
        found = generation(cc, compat, table)
        if found is None:
            continue
        if branch < found.first:
            return (
                f"no {found.name} GPU (compute capability {cc}) runs on driver {driver}: {found.name} needs branch R{found.first} "
                f"or newer (the driver CUDA {found.cuda} shipped with); give the driver the host really has"
            )
        if found.last is not None and branch > found.last:
            return (
                f"no {found.name} GPU (compute capability {cc}) runs on driver {driver}: R{found.last} is the last branch that "
                f"drives {found.name}; give the driver the host really has"
            )
    return None
