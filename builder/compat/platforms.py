"""Which framework releases publish wheels for which platform (pure): compat.yaml `platforms`.

Every release publishes linux/amd64 wheels (the rest of the table is about them); a row here says,
for another platform, a framework and the kind of base (cpu, cuda, rocm), from which release its
wheels exist there (`from`), or why none do (`none`). No row: no wheels known, a skip that names
the row to add. The rows are read from the index the way `builder updates` reads it (the files a
release lists and their platform tags) and cite it.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from builder.compat.tables import Table
from builder.model.plan import AMD64, PLATFORMS, VENDORS, Base
from builder.util.yamlsrc import LDict

SECTION = "platforms"


@dataclass(frozen=True)
class PlatformWheels:
    platform: str  # linux/arm64
    framework: str
    kind: str  # a base's vendor: cpu | cuda | rocm
    first: str | None  # the first release with wheels there; None: none
    none: str = ""  # why none, when first is None
    line: int = 0


def load_platforms(t: Table, doc: LDict) -> tuple[PlatformWheels, ...]:
    """The `platforms` rows: known platforms and kinds, one of `from`/`none`, sorted, no repeats."""
    if SECTION not in doc:
        return ()
    out: list[PlatformWheels] = []
    rows = t.rows(t.section(doc, SECTION), ("platform", "framework", "kind"), None, doc.line, optional=("from", "none"))
    for row in rows:
        platform, framework, kind = (str(row[k]) for k in ("platform", "framework", "kind"))
        if platform not in PLATFORMS or platform == AMD64:
            raise t.fail(
                f"platform {platform!r}: rows are for {', '.join(p for p in PLATFORMS if p != AMD64)} (amd64 is every release's)", row.line
            )
        if kind not in VENDORS:
            raise t.fail(f"kind {kind!r} must be one of {', '.join(VENDORS)}", row.line)
        if ("from" in row) == ("none" in row):
            raise t.fail("a row needs exactly one of 'from' (the first release with wheels) or 'none' (why there are none)", row.line)
        first = str(t.version(row["from"], row.line)) if "from" in row else None
        none = str(row.get("none") or "")
        if first is None and not none.strip():
            raise t.fail("'none' must say why no wheels exist", row.line)
        out.append(PlatformWheels(platform, framework, kind, first, none, row.line))
    keys = [(p.platform, p.framework, p.kind) for p in out]
    for i, key in enumerate(keys[1:], 1):
        if key <= keys[i - 1]:
            raise t.fail(
                f"rows must be sorted by platform, framework, kind and listed once ({'/'.join(key)} after {'/'.join(keys[i - 1])})",
                out[i].line,
            )
    return tuple(out)


def platform_reason(rows: tuple[PlatformWheels, ...], framework: str, version: str, base: Base, facts_at: str) -> str | None:
    """Why this release has no wheels for the base's platform, or None when it has."""
    if base.platform == AMD64:
        return None
    row = next((r for r in rows if (r.platform, r.framework, r.kind) == (base.platform, framework, base.vendor)), None)
    where = f"{facts_at} platforms"
    if row is None:
        return (
            f"no {base.platform} wheels of {framework} for a {base.vendor} base are known; add a {where} row for it if the index has them"
        )
    if row.first is None:
        return f"{framework} publishes no {base.platform} wheels for a {base.vendor} base: {row.none} ({where}, line {row.line})"
    if Version(version) < Version(row.first):
        return f"{framework} {version} publishes no {base.platform} wheels for a {base.vendor} base; the first is {row.first} ({where}, line {row.line})"
    return None
