"""build/results/<id>.json: the one writer and the one typed reader of smoke results, the one
`Verdict` type (and which verdicts count as good), and build.json's typed reader.

Why one place: publish, the report and the nightly loop all decide from these files, and each used
to read them its own way (a traceback on a wrong type, a hand-edited `verdict: passed` over
`tests.errors: 4` trusted and published). So a result is bound to the run that wrote it: the test
run records each file's sha256 in build/results/.index.json (under a file lock, beside the files),
and the reader refuses a file whose bytes are not the ones recorded, a file of the wrong shape, and
one whose verdict is not the verdict its own contents give, each in one line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from builder.model import amd_fit, measured_fit, probe_report
from builder.model import jsonfields as jf
from builder.model.amd_fit import AmdFit
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import AMD64, PLATFORMS, VENDORS, Vendor
from builder.model.probe_report import ProbeReport
from builder.util.errors import UserError
from builder.util.fsio import MiB, dump_json, file_lock, parse_json, read_bytes, read_json, write_atomic

Verdict = Literal["passed", "gpu-skipped", "failed", "not-built"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# The verdicts that count as good, defined once: the image works (gpu-skipped: everything but its
# GPU checks ran, on a host without its GPU). `builder test`/`run` exit 0 on these, the nightly
# counts them as passing, the catalog records only these; publish takes gpu-skipped only when accepted.
GOOD: tuple[Verdict, ...] = ("passed", "gpu-skipped")


def is_good(verdict: str) -> bool:
    return verdict in GOOD


def publishable(verdict: str, accept_gpu_skipped: bool) -> bool:
    """What publish and the nightly push: passed, and gpu-skipped when the caller accepts it."""
    return verdict == "passed" or (verdict == "gpu-skipped" and accept_gpu_skipped)


@dataclass(frozen=True)
class GpuUse:
    """Whether the run had its GPU, and why (or why not)."""

    attached: bool
    reason: str = ""


@dataclass(frozen=True)
class TestCounts:
    """pytest's JUnit counts of one run."""

    __test__ = False  # not a pytest class
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0

    @property
    def ran(self) -> int:
        return self.tests - self.skipped

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.errors

    def to_json(self) -> dict[str, int]:
        return {"tests": self.tests, "failures": self.failures, "errors": self.errors, "skipped": self.skipped}


@dataclass(frozen=True)
class TestedOn:
    """The host a verdict was reached on, as the results file and the catalog record it."""

    __test__ = False  # not a pytest class
    gpu: str  # GPU model(s), "AMD GPU (/dev/kfd)" or "no GPU"
    driver: str | None = None
    engine: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"gpu": self.gpu, "driver": self.driver, "engine": self.engine}


@dataclass(frozen=True)
class Diagnosed:
    """A known cause found in a run's output, and its fix ("" framework: not one framework's)."""

    framework: str
    cause: str
    fix: str


@dataclass(frozen=True)
class CudaCheck:
    """One CUDA check that ran without a GPU: a framework's (built-for, a kernel compiled) or a library's ("")."""

    framework: str
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class HipCheck:
    """One HIP check of a ROCm base's smoke test (smoke/hip.py): a library loaded, a kernel compiled
    by hiprtc for a target its code object holds, the device call's answer."""

    name: str  # hip-runtime, rocblas, hiprtc gfx90a, hip-device-count
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class SmokeResult:
    id: str
    tag: str
    verdict: Verdict
    gpu: GpuUse
    seconds: float
    tests: TestCounts = field(default_factory=TestCounts)
    failures: tuple[str, ...] = ()
    diagnoses: tuple[Diagnosed, ...] = ()
    probe: ProbeReport | None = None
    date: str = ""
    cuda_checks: tuple[CudaCheck, ...] = ()  # the CUDA checks that ran without a GPU
    content_hash: str = ""  # the io.builder.content-hash label of the image that was tested
    image_id: str = ""  # the engine's id of that image: publish refuses one that changed since
    host: TestedOn | None = None  # where it ran: GPU model and driver, or "no GPU"; None: it did not run
    returncode: int = -1  # pytest's exit code (124: timed out): with tests, gpu and vendor it gives the verdict
    vendor: Vendor | Literal[""] = ""  # the image's accelerator vendor ("": the run never started)
    fit: MeasuredFit | None = None  # a CUDA image's measured fit (builder/model/measured_fit.py); None: not measured
    fit_error: str = ""  # why measuring it failed, when it did
    platform: str = AMD64  # the image's platform (linux/arm64): what its checks ran on
    emulated: bool = False  # its platform is not the host's: the checks ran under qemu-user emulation
    hip_checks: tuple[HipCheck, ...] = ()  # a ROCm base's HIP checks (its base-level smoke test, smoke/base.py)
    amd_fit: AmdFit | None = None  # a ROCm base's measured AMD fit: its libraries' code objects

    @property
    def cuda_checks_passed(self) -> int:
        return sum(c.ok for c in self.cuda_checks)

    def to_json(self) -> dict[str, Any]:
        """The results file's keys (unchanged since the dict form: readers of old files keep working)."""
        return {
            "id": self.id,
            "tag": self.tag,
            "verdict": self.verdict,
            "gpu": {"attached": self.gpu.attached, "reason": self.gpu.reason},
            "seconds": self.seconds,
            "tests": self.tests.to_json(),
            "failures": list(self.failures),
            "diagnoses": [{"framework": d.framework, "cause": d.cause, "fix": d.fix} for d in self.diagnoses],
            "probe": self.probe.to_json() if self.probe else None,
            "date": self.date,
            "cuda_checks": [{"framework": c.framework, "name": c.name, "ok": c.ok, "detail": c.detail} for c in self.cuda_checks],
            "content_hash": self.content_hash,
            "image_id": self.image_id,
            "host": self.host.to_json() if self.host else {},
            "returncode": self.returncode,
            "vendor": self.vendor,
            "fit": self.fit.to_json() if self.fit else None,
            "fit_error": self.fit_error,
            "platform": self.platform,
            "emulated": self.emulated,
            **({"hip_checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.hip_checks]} if self.hip_checks else {}),
            **({"amd_fit": self.amd_fit.to_json()} if self.amd_fit else {}),
        }


def verdict_of(returncode: int, counts: TestCounts, attached: bool, vendor: str) -> Verdict:
    if returncode != 0 or counts.failures or counts.errors or counts.ran <= 0:
        return "failed"  # nothing checked is not a pass
    if vendor != "cpu" and not attached:
        return "gpu-skipped"
    return "passed"


INDEX = ".index.json"
INDEX_SCHEMA = 1
LIMIT = 16 * MiB  # a probe's JSON and pytest's first lines: far below this
RERUN = "run `builder test` again"


def path_of(results_dir: Path, image_id: str) -> Path:
    return results_dir / f"{image_id}.json"


def _lock(results_dir: Path) -> AbstractContextManager[object]:
    return file_lock(results_dir / f"{INDEX}.lock", timeout=120)


def _read_index(results_dir: Path) -> dict[str, str]:
    """id -> sha256 of the result file the last test run wrote; {} when there is no index."""
    path = results_dir / INDEX
    if not path.exists():
        return {}
    doc = parse_json(read_bytes(path, LIMIT, "results index"), str(path))
    entries = doc.get("sha256") if isinstance(doc, dict) and doc.get("schema") == INDEX_SCHEMA else None
    if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
        raise UserError(f"not a results index this tool wrote; {RERUN}", str(path))
    return {str(k): str(v) for k, v in entries.items()}


def write(results_dir: Path, result: SmokeResult) -> Path:
    """Write one result (atomically) and record its sha256 in the run index: only the test run binds results."""
    text = dump_json(result.to_json())
    path = path_of(results_dir, result.id)
    results_dir.mkdir(parents=True, exist_ok=True)
    with _lock(results_dir):
        try:
            index = _read_index(results_dir)
        except UserError:
            index = {}  # a broken index binds nothing: start it again with this result
        write_atomic(path, text)
        index[result.id] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        write_atomic(results_dir / INDEX, dump_json({"schema": INDEX_SCHEMA, "sha256": dict(sorted(index.items()))}))
    return path


def load(results_dir: Path, image_id: str) -> SmokeResult | None:
    """The result of the last test run of `image_id`; None when it was never tested. A file that is
    not the test run's (edited, malformed, inconsistent) is a one-line UserError naming it."""
    path = path_of(results_dir, image_id)
    if not path.exists() and not path.is_symlink():
        return None
    data = read_bytes(path, LIMIT, "smoke result")
    recorded = _read_index(results_dir).get(image_id)
    if recorded != hashlib.sha256(data).hexdigest():
        why = "no test run recorded it" if recorded is None else "it changed since the test run wrote it"
        raise UserError(f"refused: {why} (its sha256 is not in {INDEX}); {RERUN}", str(path))
    result = from_json(parse_json(data, str(path)), str(path))
    if result.id != image_id:
        raise UserError(f"is the result of {result.id!r}, not {image_id!r}; {RERUN}", str(path))
    return result


# -- the typed reader ---------------------------------------------------------------------------


def _member(choices: tuple[str, ...], name: str) -> jf.Reader:
    """Text that is one of `choices`, else "<name> 'x' is not one of a, b"."""

    def read(value: Any, key: str, fail: jf.Fail) -> str:
        found = jf.text(value, key, fail)
        if found not in choices:
            raise fail(f"{name} {found[:40]!r} is not one of {', '.join(choices)}")
        return found

    return read


def _gpu(value: Any, key: str, fail: jf.Fail) -> GpuUse:
    gpu = jf.obj(value, key, fail)
    if not isinstance(gpu.get("attached"), bool) or not isinstance(gpu.get("reason", ""), str):
        raise fail(f"{key!r} must hold attached (true/false) and reason")
    return GpuUse(gpu["attached"], gpu.get("reason", ""))


def _text_or_empty(value: Any, key: str, fail: jf.Fail) -> str:
    """Text, with null (or any empty value) read as "": a check's detail."""
    return jf.text(value or "", key, fail)


HOST_FIELDS = (jf.Field("gpu", jf.text), jf.Field("driver", jf.optional_text, None), jf.Field("engine", jf.optional_text, None))
_host = jf.nested(HOST_FIELDS, TestedOn)


def tested_on(value: Any, key: str, fail: jf.Fail) -> TestedOn:
    """The host a verdict was reached on ({"gpu", "driver", "engine"}), refusing other keys."""
    return cast(TestedOn, _host(value, key, fail))


def _ran_on(value: Any, key: str, fail: jf.Fail) -> TestedOn | None:
    """A results file's host: {} (or null) when the run never started."""
    return None if value in ({}, None) else tested_on(value, key, fail)


# A results file's keys. Those with a default are absent from files written before fits (and
# platforms) were measured; the rest are required. `probe` is read in from_json (its refusal names
# the results file it sits in).
FIELDS = (
    jf.Field("id", jf.text),
    jf.Field("tag", jf.text),
    jf.Field("verdict", _member(VERDICTS, "verdict")),
    jf.Field("vendor", _member(VENDORS, "vendor")),
    jf.Field("platform", _member(PLATFORMS, "platform"), AMD64),
    jf.Field("gpu", _gpu),
    jf.Field("seconds", jf.number),
    jf.Field("tests", jf.nested(tuple(jf.Field(k, jf.whole, 0) for k in ("tests", "failures", "errors", "skipped")), TestCounts)),
    jf.Field("failures", jf.texts),
    jf.Field(
        "diagnoses",
        jf.each(
            jf.nested(
                (jf.Field("framework", jf.text, ""), jf.Field("cause", jf.text), jf.Field("fix", jf.text, "")), Diagnosed, closed=False
            )
        ),
    ),
    jf.Field("date", jf.text),
    jf.Field(
        "cuda_checks",
        jf.each(
            jf.nested(
                (
                    jf.Field("framework", jf.text, ""),
                    jf.Field("name", jf.text),
                    jf.Field("ok", jf.flag),
                    jf.Field("detail", _text_or_empty, ""),
                ),
                CudaCheck,
                closed=False,
            )
        ),
    ),
    jf.Field("content_hash", jf.text),
    jf.Field("image_id", jf.text),
    jf.Field("host", _ran_on),
    jf.Field("returncode", jf.whole),
    jf.Field("fit", jf.optional(measured_fit.from_json), None),
    jf.Field("fit_error", jf.text, ""),
    jf.Field("emulated", jf.flag, False),
    jf.Field(
        "hip_checks",
        jf.each(jf.nested((jf.Field("name", jf.text), jf.Field("ok", jf.flag), jf.Field("detail", _text_or_empty, "")), HipCheck)),
        (),
    ),
    jf.Field("amd_fit", jf.optional(amd_fit.from_json), None),
)


def _hip_consistent(result: SmokeResult, where: str) -> None:
    """A base's result (its HIP checks) is never `passed`, and counts each failed check once."""
    if result.hip_checks and (result.verdict == "passed" or result.tests.failures != sum(not c.ok for c in result.hip_checks)):
        raise UserError(
            f"refused: its verdict and counts are not what its HIP checks give (a base never passes: nothing ran on a GPU); {RERUN}", where
        )


def from_json(data: Any, where: str) -> SmokeResult:
    """A SmokeResult from its JSON, every field checked for its type, and the verdict recomputed
    from the file's own contents (exit code, test counts, GPU, vendor)."""

    def fail(what: str) -> UserError:
        return UserError(f"not a smoke result this tool wrote: {what}; {RERUN}", where)

    def probe(value: Any, key: str, fail: jf.Fail) -> ProbeReport | None:
        return None if value is None else probe_report.from_json(value, f"{where} (its {key!r})")

    fields = (*FIELDS, jf.Field("probe", probe))
    doc = jf.obj(data, "the file", fail)
    missing = sorted(jf.missing(doc, fields))
    if missing:
        raise fail(f"it lacks {', '.join(missing)}")
    unknown = jf.unknown(doc, fields)
    if unknown:
        raise fail(f"unknown keys {', '.join(k[:40] for k in unknown[:5])}")
    result = SmokeResult(**jf.read_fields(doc, fields, fail))
    recomputed = verdict_of(result.returncode, result.tests, result.gpu.attached, result.vendor)
    _hip_consistent(result, where)
    if result.verdict != "not-built" and result.verdict != recomputed:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(result.tests.to_json().items()))
        raise UserError(
            f"refused: its verdict {result.verdict!r} is not what its own contents give ({recomputed!r}: exit {result.returncode}, {counts}); {RERUN}",
            where,
        )
    return result


# -- build/results/build.json -------------------------------------------------------------------

BUILD_SUMMARY = "build.json"


@dataclass(frozen=True)
class Built:
    """What the report reads of one build.json entry (the file holds the engine's whole BuildResult)."""

    id: str
    status: str
    image_mb: float | None = None
    shared_mb: float | None = None  # MB above the base another image of its line holds too (engine/sizes.py line_shares)


def write_builds(path: Path, entries: Sequence[Mapping[str, object]]) -> None:
    """build.json: one entry per image of the last build (engine.build.BuildResult as JSON)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dump_json(list(entries)))


def read_builds(path: Path) -> tuple[Built, ...]:
    """build.json's entries; () when there is none. One that is not the file `builder build`
    writes is a one-line UserError naming it (the report shows it as a note, not silence)."""
    if not path.exists():
        return ()

    def fail(what: str) -> UserError:
        return UserError(f"not the build summary `builder build` writes: {what}; run `builder build` again", str(path))

    entries = read_json(path, LIMIT, "build summary")
    out = []
    for entry in jf.objs(entries, "the file", fail):
        sizes = entry.get("sizes")
        found = jf.obj(sizes, "sizes", fail) if sizes is not None else {}
        image_mb = jf.number(found.get("image_mb"), "sizes.image_mb", fail) if sizes is not None else None
        shared_mb = jf.number(found["shared_mb"], "sizes.shared_mb", fail) if "shared_mb" in found else None
        out.append(Built(jf.text(entry.get("id"), "id", fail), jf.text(entry.get("status"), "status", fail), image_mb, shared_mb))
    return tuple(out)
