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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import filelock

from builder.model import jsonfields as jf
from builder.model import measured_fit, probe_report
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import AMD64, PLATFORMS, VENDORS, Vendor
from builder.model.probe_report import ProbeReport
from builder.util.errors import UserError
from builder.util.fsio import MiB, dump_json, parse_json, read_bytes, read_json, write_atomic

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


def _lock(results_dir: Path) -> filelock.FileLock:
    return filelock.FileLock(str(results_dir / f"{INDEX}.lock"), timeout=120)


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


def tested_on(value: Any, key: str, fail: jf.Fail) -> TestedOn:
    host = jf.obj(value, key, fail)
    unknown = sorted(set(host) - {"gpu", "driver", "engine"})
    if unknown:
        raise fail(f"{key!r} has unknown keys {', '.join(k[:40] for k in unknown[:5])}")
    return TestedOn(
        gpu=jf.text(host.get("gpu"), f"{key}.gpu", fail),
        driver=jf.optional_text(host.get("driver"), f"{key}.driver", fail),
        engine=jf.optional_text(host.get("engine"), f"{key}.engine", fail),
    )


def _counts(value: Any, fail: jf.Fail) -> TestCounts:
    counts = jf.obj(value, "tests", fail)
    unknown = sorted(set(counts) - set(TestCounts.__dataclass_fields__))
    if unknown:
        raise fail(f"'tests' has unknown keys {', '.join(k[:40] for k in unknown[:5])}")
    return TestCounts(**{k: jf.whole(v, f"tests.{k}", fail) for k, v in counts.items()})


def from_json(data: Any, where: str) -> SmokeResult:
    """A SmokeResult from its JSON, every field checked for its type, and the verdict recomputed
    from the file's own contents (exit code, test counts, GPU, vendor)."""

    def fail(what: str) -> UserError:
        return UserError(f"not a smoke result this tool wrote: {what}; {RERUN}", where)

    doc = jf.obj(data, "the file", fail)
    names = {"id", "tag", "verdict", "gpu", "seconds", "tests", "failures", "diagnoses", "probe", "date", "cuda_checks"}
    names |= {"content_hash", "image_id", "host", "returncode", "vendor"}
    optional = {"fit", "fit_error", "platform", "emulated"}  # results written before fits were measured (and platforms) lack them
    missing = sorted(names - set(doc))
    if missing:
        raise fail(f"it lacks {', '.join(missing)}")
    unknown = sorted(set(doc) - names - optional)
    if unknown:
        raise fail(f"unknown keys {', '.join(k[:40] for k in unknown[:5])}")
    verdict = jf.text(doc["verdict"], "verdict", fail)
    vendor = jf.text(doc["vendor"], "vendor", fail)
    if verdict not in VERDICTS or vendor not in VENDORS:
        raise fail(f"verdict {verdict[:40]!r} / vendor {vendor[:40]!r} unknown")
    platform = jf.text(doc.get("platform", AMD64), "platform", fail)
    if platform not in PLATFORMS:
        raise fail(f"platform {platform[:40]!r} is not one of {', '.join(PLATFORMS)}")
    gpu = jf.obj(doc["gpu"], "gpu", fail)
    if not isinstance(gpu.get("attached"), bool) or not isinstance(gpu.get("reason", ""), str):
        raise fail("'gpu' must hold attached (true/false) and reason")
    diagnoses = jf.objs(doc["diagnoses"], "diagnoses", fail)
    checks = jf.objs(doc["cuda_checks"], "cuda_checks", fail)
    result = SmokeResult(
        id=jf.text(doc["id"], "id", fail),
        tag=jf.text(doc["tag"], "tag", fail),
        verdict=verdict,  # checked against VERDICTS above
        gpu=GpuUse(gpu["attached"], gpu.get("reason", "")),
        seconds=jf.number(doc["seconds"], "seconds", fail),
        tests=_counts(doc["tests"], fail),
        failures=jf.texts(doc["failures"], "failures", fail),
        diagnoses=tuple(
            Diagnosed(
                jf.text(d.get("framework", ""), "diagnoses.framework", fail),
                jf.text(d.get("cause"), "diagnoses.cause", fail),
                jf.text(d.get("fix", ""), "diagnoses.fix", fail),
            )
            for d in diagnoses
        ),
        probe=None if doc["probe"] is None else probe_report.from_json(doc["probe"], f"{where} (its 'probe')"),
        date=jf.text(doc["date"], "date", fail),
        cuda_checks=tuple(
            CudaCheck(
                jf.text(c.get("framework", ""), "cuda_checks.framework", fail),
                jf.text(c.get("name"), "cuda_checks.name", fail),
                jf.flag(c.get("ok"), "cuda_checks.ok", fail),
                jf.text(c.get("detail") or "", "cuda_checks.detail", fail),
            )
            for c in checks
        ),
        content_hash=jf.text(doc["content_hash"], "content_hash", fail),
        image_id=jf.text(doc["image_id"], "image_id", fail),
        host=tested_on(doc["host"], "host", fail) if doc["host"] not in ({}, None) else None,
        returncode=jf.whole(doc["returncode"], "returncode", fail),
        vendor=vendor,  # checked against VENDORS above
        fit=None if doc.get("fit") is None else measured_fit.from_json(doc["fit"], "fit", fail),
        fit_error=jf.text(doc.get("fit_error", ""), "fit_error", fail),
        platform=platform,
        emulated=jf.flag(doc.get("emulated", False), "emulated", fail),
    )
    recomputed = verdict_of(result.returncode, result.tests, result.gpu.attached, vendor)
    if verdict != "not-built" and verdict != recomputed:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(result.tests.to_json().items()))
        raise UserError(
            f"refused: its verdict {verdict!r} is not what its own contents give ({recomputed!r}: exit {result.returncode}, {counts}); {RERUN}",
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
        image_mb = jf.number(jf.obj(sizes, "sizes", fail).get("image_mb"), "sizes.image_mb", fail) if sizes is not None else None
        out.append(Built(jf.text(entry.get("id"), "id", fail), jf.text(entry.get("status"), "status", fail), image_mb))
    return tuple(out)
