"""Which CUDA release first loads each PTX ISA version (data/ptx_isa.yaml).

PTX is JIT-compiled by the driver, and a driver only compiles the PTX ISA versions it knows: the
minor-version compatibility rule covers SASS, not newer PTX. So PTX that is an image's only way
onto a GPU needs the driver of the CUDA release that introduced its ISA version.
"""

from __future__ import annotations

import functools
from pathlib import Path

from builder.compat.tables import DATA_DIR, Table

TABLE_PATH = DATA_DIR / "ptx_isa.yaml"


def load_table(path: Path = TABLE_PATH) -> tuple[tuple[str, str], ...]:
    """(PTX ISA version, first CUDA release) rows, sorted by PTX ISA version; a broken row is a UserError with file:line."""
    t = Table(path, what="PTX ISA table")
    t.only(t.doc, ("schema", "rows"), "the top level")
    rows = t.rows(t.section(t.doc, "rows"), ("ptx", "cuda"), "ptx", t.doc.line)
    out = []
    for row in rows:
        for key in ("ptx", "cuda"):
            if not isinstance(row[key], str):
                raise t.fail(f"`{key}` must be a quoted version, got {row[key]!r}", row.line)
            t.version(row[key], row.line)
        out.append((str(row["ptx"]), str(row["cuda"])))
    return tuple(out)


@functools.cache
def default_table() -> tuple[tuple[str, str], ...]:
    return load_table(TABLE_PATH)


def cuda_for(ptx: str, table: tuple[tuple[str, str], ...] | None = None) -> str | None:
    """The first CUDA release (major.minor) that loads PTX ISA `ptx`; None when the table does not know it."""
    return dict(default_table() if table is None else table).get(ptx)
