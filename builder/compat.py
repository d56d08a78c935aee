"""The compatibility table (builder/data/compat.yaml) as typed, guarded records.

The loader refuses a table that looks broken (unknown keys, a row without a source,
unparsable or unsorted versions), so a bad edit fails loudly instead of deciding wrongly.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from builder.errors import UserError
from builder.yamlsrc import LDict, LList, load

DEFAULT_PATH = Path(__file__).parent / "data" / "compat.yaml"
PyRange = tuple[str, str]
SECTIONS: dict[str, tuple[str, ...]] = {
    "cuda": ("toolkits", "mvc_floor", "require_branches", "brands"),
    "torch": ("index_url", "releases"),
    "tensorflow": ("releases", "and_cuda_from", "rocm_index_url", "rocm"),
    "jax": ("bands", "cuda12_min", "cuda13_min", "numpy_min"),
    "cupy": ("releases", "rocm_note"),
    "numba": ("releases", "numba_cuda"),
}


@dataclass(frozen=True)
class OsPython:
    os: str
    python: str
    packages: tuple[str, ...]
    bin: str


@dataclass(frozen=True)
class TorchRelease:
    release: str
    python: PyRange
    cuda: tuple[str, ...]
    rocm: tuple[str, ...]
    cudnn: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TfRelease:
    release: str
    python: PyRange
    cuda: str
    cudnn: str


@dataclass(frozen=True)
class JaxRocm:
    extra: str
    plugin: str
    rocm: str  # "6.0" (exact minor) or "7" (any 7.x)


@dataclass(frozen=True)
class JaxBand:
    start: str
    python: PyRange
    cuda12: bool
    cuda13: bool
    cudnn_min: str
    rocm: JaxRocm | None


@dataclass(frozen=True)
class CupyRelease:
    release: str
    cuda: tuple[str, str]
    packages: tuple[tuple[str, str], ...]  # CUDA major -> package
    python: PyRange
    numpy: tuple[str, str]


@dataclass(frozen=True)
class NumbaRelease:
    version: str
    python: PyRange
    numpy: tuple[str, str]


@dataclass(frozen=True)
class NumbaCuda:
    version: str
    numba_min: str
    extras: tuple[tuple[str, str], ...]
    numpy_max: str


@dataclass(frozen=True)
class Compat:
    os_python: tuple[OsPython, ...]
    cuda_toolkits: tuple[tuple[str, str], ...]  # (cuda patch, driver)
    mvc_floor: tuple[tuple[str, str], ...]  # (major, driver)
    require_branches: tuple[tuple[str, tuple[int, ...]], ...]
    brands: tuple[tuple[str, tuple[str, ...]], ...]  # (until cuda, brand names)
    numpy: tuple[tuple[str, PyRange], ...]
    torch_index_url: str
    torch: tuple[TorchRelease, ...]
    tensorflow: tuple[TfRelease, ...]
    tf_and_cuda_from: str
    tf_rocm_index_url: str
    tf_rocm: tuple[tuple[str, tuple[str, ...]], ...]
    jax: tuple[JaxBand, ...]
    jax_cuda12_min: str
    jax_cuda13_min: str
    jax_numpy_min: tuple[tuple[str, str], ...]
    cupy: tuple[CupyRelease, ...]
    cupy_rocm_note: str
    numba: tuple[NumbaRelease, ...]
    numba_cuda: NumbaCuda


class _Reader:
    """Row access with guards; every complaint names compat.yaml and the line."""

    def __init__(self, file: str, sources: set[str]) -> None:
        self.file = file
        self.sources = sources

    def fail(self, message: str, line: int) -> UserError:
        return UserError(f"broken compatibility table: {message}", self.file, line)

    def section(self, doc: LDict, key: str) -> Any:
        if key not in doc:
            raise self.fail(f"missing section '{key}'", doc.line)
        return doc[key]

    def sub(self, doc: LDict, section: str, key: str) -> Any:
        """doc[section][key], refusing a missing one with the line of its section."""
        value = self.section(doc, section)
        if not isinstance(value, LDict):
            raise self.fail(f"section '{section}' must be a mapping", doc.line_of(section))
        return self.section(value, key)

    def rows(self, value: Any, keys: Sequence[str], sort_key: str | None, line: int) -> list[LDict]:
        if not isinstance(value, LList) or not value:
            raise self.fail("expected a non-empty list of rows", getattr(value, "line", line))
        out: list[LDict] = []
        for i, row in enumerate(value):
            if not isinstance(row, LDict):
                raise self.fail("each row must be a mapping", value.line_of(i))
            unknown = set(row) - set(keys) - {"source"}
            if unknown:
                raise self.fail(f"unknown key(s) {sorted(unknown)}; allowed: {list(keys)}", row.line)
            missing = [k for k in keys if k not in row]
            if missing:
                raise self.fail(f"row lacks {missing}", row.line)
            self.source(row)
            out.append(row)
        if sort_key is not None:
            self.sorted([(self.version(r[sort_key], r.line), r.line) for r in out])
        return out

    def source(self, row: LDict) -> None:
        refs = row.get("source")
        refs = refs if isinstance(refs, list) else [refs]
        if not refs or refs == [None]:
            raise self.fail("row has no source; cite one of the keys in `sources`", row.line)
        for ref in refs:
            if ref not in self.sources:
                raise self.fail(f"unknown source {ref!r}; add it to `sources`", row.line)

    def version(self, value: Any, line: int) -> Version:
        try:
            return Version(str(value))
        except InvalidVersion:
            raise self.fail(f"{value!r} is not a version", line) from None

    def sorted(self, versions: list[tuple[Version, int]]) -> None:
        for (a, _), (b, line) in itertools.pairwise(versions):
            if b <= a:
                raise self.fail(f"rows must be sorted by version ascending ({b} after {a})", line)

    def pyrange(self, value: Any, line: int) -> PyRange:
        if not isinstance(value, list) or len(value) != 2:
            raise self.fail("a range must be [min, max]", line)
        low, high = (str(v) for v in value)
        if self.version(low, line) > self.version(high, line):
            raise self.fail(f"range [{low}, {high}] has min > max", line)
        return low, high

    def strs(self, value: Any, line: int) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail("expected a list of strings", line)
        return tuple(value)


def load_compat(path: Path = DEFAULT_PATH) -> Compat:
    file = str(path)
    doc = load(path, file)
    if not isinstance(doc, LDict) or doc.get("schema") != 1:
        raise UserError("broken compatibility table: expected `schema: 1` at the top", file, 1)
    sources = doc.get("sources")
    if not isinstance(sources, LDict) or not sources:
        raise UserError("broken compatibility table: `sources` is missing", file, 1)
    r = _Reader(file, set(sources))
    for key, allowed in SECTIONS.items():
        section = doc.get(key)
        if isinstance(section, LDict):
            unknown = sorted(set(section) - set(allowed))
            if unknown:
                raise r.fail(f"unknown key(s) {unknown} in section '{key}'; allowed: {list(allowed)}", section.line_of(unknown[0]))
    unknown_top = sorted(set(doc) - {"schema", "sources", "os_python", "numpy", *SECTIONS})
    if unknown_top:
        raise r.fail(f"unknown section(s) {unknown_top}", doc.line_of(unknown_top[0]))
    return Compat(
        os_python=_os_python(r, doc),
        cuda_toolkits=tuple(
            (str(row["cuda"]), str(row["driver"])) for row in r.rows(r.sub(doc, "cuda", "toolkits"), ("cuda", "driver"), "cuda", doc.line)
        ),
        mvc_floor=tuple(
            (str(row["major"]), str(row["driver"]))
            for row in r.rows(r.sub(doc, "cuda", "mvc_floor"), ("major", "driver"), "major", doc.line)
        ),
        require_branches=tuple(
            (str(row["cuda"]), tuple(int(b) for b in row["branches"]))
            for row in r.rows(r.sub(doc, "cuda", "require_branches"), ("cuda", "branches"), "cuda", doc.line)
        ),
        brands=tuple(
            (str(row["until"]), r.strs(row["names"], row.line))
            for row in r.rows(r.sub(doc, "cuda", "brands"), ("until", "names"), "until", doc.line)
        ),
        numpy=tuple(
            (str(row["version"]), r.pyrange(row["python"], row.line))
            for row in r.rows(r.section(doc, "numpy"), ("version", "python"), "version", doc.line)
        ),
        torch_index_url=str(r.sub(doc, "torch", "index_url")),
        torch=_torch(r, r.section(doc, "torch")),
        tensorflow=tuple(
            TfRelease(str(row["release"]), r.pyrange(row["python"], row.line), str(row["cuda"]), str(row["cudnn"]))
            for row in r.rows(r.sub(doc, "tensorflow", "releases"), ("release", "python", "cuda", "cudnn"), "release", doc.line)
        ),
        tf_and_cuda_from=str(r.sub(doc, "tensorflow", "and_cuda_from")),
        tf_rocm_index_url=str(r.sub(doc, "tensorflow", "rocm_index_url")),
        tf_rocm=tuple(
            (str(row["rocm"]), r.strs(row["tf"], row.line))
            for row in r.rows(r.sub(doc, "tensorflow", "rocm"), ("rocm", "tf"), "rocm", doc.line)
        ),
        jax=_jax(r, r.section(doc, "jax")),
        jax_cuda12_min=str(r.sub(doc, "jax", "cuda12_min")),
        jax_cuda13_min=str(r.sub(doc, "jax", "cuda13_min")),
        jax_numpy_min=tuple((str(k), str(v)) for k, v in r.sub(doc, "jax", "numpy_min").items()),
        cupy=_cupy(r, r.section(doc, "cupy")),
        cupy_rocm_note=str(r.sub(doc, "cupy", "rocm_note")),
        numba=tuple(
            NumbaRelease(str(row["version"]), r.pyrange(row["python"], row.line), r.pyrange(row["numpy"], row.line))
            for row in r.rows(r.sub(doc, "numba", "releases"), ("version", "python", "numpy"), "version", doc.line)
        ),
        numba_cuda=_numba_cuda(r, r.section(doc, "numba")),
    )


def _os_python(r: _Reader, doc: LDict) -> tuple[OsPython, ...]:
    rows = r.rows(r.section(doc, "os_python"), ("os", "python", "packages", "bin"), None, doc.line)
    return tuple(OsPython(str(x["os"]), str(x["python"]), r.strs(x["packages"], x.line), str(x["bin"])) for x in rows)


def _torch(r: _Reader, section: LDict) -> tuple[TorchRelease, ...]:
    rows = r.rows(r.section(section, "releases"), ("release", "python", "cuda", "rocm", "cudnn"), "release", section.line)
    out = []
    for row in rows:
        cuda = r.strs(row["cuda"], row.line)
        if any(not v.startswith("cu") or not v[2:].isdigit() for v in cuda):
            raise r.fail(f"torch CUDA variants must look like cu124: {cuda}", row.line)
        cudnn = row["cudnn"]
        if not isinstance(cudnn, dict) or set(cudnn) - set(cuda):
            raise r.fail("torch cudnn must map the release's CUDA variants", row.line)
        out.append(
            TorchRelease(
                str(row["release"]), r.pyrange(row["python"], row.line), cuda, r.strs(row["rocm"], row.line), tuple(sorted(cudnn.items()))
            )
        )
    return tuple(out)


def _jax(r: _Reader, section: LDict) -> tuple[JaxBand, ...]:
    keys = ("from", "python", "cuda12", "cuda13", "cudnn_min", "rocm")
    out = []
    for row in r.rows(r.section(section, "bands"), keys, "from", section.line):
        rocm = row["rocm"]
        jr = None
        if rocm is not None:
            if not isinstance(rocm, dict) or set(rocm) != {"extra", "plugin", "rocm"}:
                raise r.fail("jax rocm must be null or {extra, plugin, rocm}", row.line)
            jr = JaxRocm(str(rocm["extra"]), str(rocm["plugin"]), str(rocm["rocm"]))
        out.append(
            JaxBand(
                str(row["from"]), r.pyrange(row["python"], row.line), bool(row["cuda12"]), bool(row["cuda13"]), str(row["cudnn_min"]), jr
            )
        )
    return tuple(out)


def _cupy(r: _Reader, section: LDict) -> tuple[CupyRelease, ...]:
    keys = ("release", "cuda", "packages", "python", "numpy")
    out = []
    for row in r.rows(r.section(section, "releases"), keys, "release", section.line):
        packages = row["packages"]
        if not isinstance(packages, dict) or not all(str(p).startswith("cupy-cuda") for p in packages.values()):
            raise r.fail("cupy packages must map a CUDA major to a cupy-cudaNNx package", row.line)
        out.append(
            CupyRelease(
                str(row["release"]),
                r.pyrange(row["cuda"], row.line),
                tuple(sorted((str(k), str(v)) for k, v in packages.items())),
                r.pyrange(row["python"], row.line),
                r.pyrange(row["numpy"], row.line),
            )
        )
    return tuple(out)


def _numba_cuda(r: _Reader, section: LDict) -> NumbaCuda:
    row = section.get("numba_cuda")
    if not isinstance(row, LDict):
        raise r.fail("numba.numba_cuda is missing", section.line)
    r.source(row)
    return NumbaCuda(
        str(row["version"]), str(row["numba_min"]), tuple(sorted((str(k), str(v)) for k, v in row["extras"].items())), str(row["numpy_max"])
    )


@functools.cache
def table() -> Compat:
    """The shipped table, loaded once per process."""
    return load_compat()
