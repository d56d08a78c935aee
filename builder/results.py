"""build/results/<id>.json: the one writer and the one typed reader of smoke results.

Why one place: publish, the report and the nightly loop all decide from these files, and each used
to read them its own way (a traceback on a wrong type, a hand-edited `verdict: passed` over
`tests.errors: 4` trusted and published). So a result is bound to the run that wrote it: the test
run records each file's sha256 in build/results/.index.json (under a file lock, beside the files),
and the reader refuses a file whose bytes are not the ones recorded, a file of the wrong shape, and
one whose verdict is not the verdict its own contents give, each in one line.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import filelock

from builder.errors import UserError
from builder.fsio import MiB, dump_json, parse_json, read_bytes, write_atomic
from builder.records import VENDORS


@dataclass(frozen=True)
class SmokeResult:
    id: str
    tag: str
    verdict: str  # passed | gpu-skipped | failed | not-built
    gpu: dict[str, Any]
    seconds: float
    tests: dict[str, int] = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    diagnoses: tuple[dict[str, str], ...] = ()
    probe: dict[str, Any] | None = None
    date: str = ""
    cuda_checks: tuple[dict[str, Any], ...] = ()  # the CUDA checks that ran without a GPU, each with ok
    content_hash: str = ""  # the io.builder.content-hash label of the image that was tested
    image_id: str = ""  # the engine's id of that image: publish refuses one that changed since
    host: dict[str, Any] = field(default_factory=dict)  # where it ran: GPU model and driver, or "no GPU"
    returncode: int = -1  # pytest's exit code (124: timed out): with tests, gpu and vendor it gives the verdict
    vendor: str = ""  # the image's accelerator vendor (cuda, rocm, cpu)

    @property
    def cuda_checks_passed(self) -> int:
        return sum(bool(c.get("ok")) for c in self.cuda_checks)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verdict_of(returncode: int, counts: dict[str, int], attached: bool, vendor: str) -> str:
    ran = counts.get("tests", 0) - counts.get("skipped", 0)
    if returncode != 0 or counts.get("failures") or counts.get("errors") or ran <= 0:
        return "failed"  # nothing checked is not a pass
    if vendor != "cpu" and not attached:
        return "gpu-skipped"
    return "passed"


INDEX = ".index.json"
INDEX_SCHEMA = 1
LIMIT = 16 * MiB  # a probe's JSON and pytest's first lines: far below this
VERDICTS = ("passed", "gpu-skipped", "failed", "not-built")
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


def _fail(where: str, what: str) -> UserError:
    return UserError(f"not a smoke result this tool wrote: {what}; {RERUN}", where)


def _str(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _fail(where, f"{key!r} must be text")
    return value


def _int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"{key!r} must be a whole number")
    return value


def _dict(value: Any, key: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"{key!r} must be an object")
    return value


def _dicts(value: Any, key: str, where: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise _fail(where, f"{key!r} must be a list of objects")
    return tuple(value)


def _probe(value: Any, where: str) -> dict[str, Any] | None:
    """The parts of the probe's JSON that publish, the report and the nightly loop read."""
    if value is None:
        return None
    probe = _dict(value, "probe", where)
    for name, found in _dict(probe.get("frameworks") or {}, "probe.frameworks", where).items():
        entry = _dict(found, f"probe.frameworks.{name}", where)
        _dict(entry.get("build") or {}, f"probe.frameworks.{name}.build", where)
        _dicts(entry.get("offline") or [], f"probe.frameworks.{name}.offline", where)
    cuda = _dict(probe.get("cuda") or {}, "probe.cuda", where)
    _dicts(cuda.get("checks") or [], "probe.cuda.checks", where)
    _dict(probe.get("host") or {}, "probe.host", where)
    return probe


def from_json(data: Any, where: str) -> SmokeResult:
    """A SmokeResult from its JSON, every field checked for the type the readers rely on, and the
    verdict recomputed from the file's own contents (exit code, test counts, GPU, vendor)."""
    doc = _dict(data, "the file", where)
    names = set(SmokeResult.__dataclass_fields__)
    missing = sorted(names - set(doc))
    if missing:
        raise _fail(where, f"it lacks {', '.join(missing)}")
    unknown = sorted(set(doc) - names)
    if unknown:
        raise _fail(where, f"unknown keys {', '.join(unknown)}")
    verdict = _str(doc, "verdict", where)
    vendor = _str(doc, "vendor", where)
    if verdict not in VERDICTS or vendor not in VENDORS:
        raise _fail(where, f"verdict {verdict!r} / vendor {vendor!r} unknown")
    gpu = _dict(doc["gpu"], "gpu", where)
    if not isinstance(gpu.get("attached"), bool) or not isinstance(gpu.get("reason", ""), str):
        raise _fail(where, "'gpu' must hold attached (true/false) and reason")
    tests = {str(k): _int(v, f"tests.{k}", where) for k, v in _dict(doc["tests"], "tests", where).items()}
    failures = doc["failures"]
    if not isinstance(failures, list) or not all(isinstance(f, str) for f in failures):
        raise _fail(where, "'failures' must be a list of text")
    diagnoses = _dicts(doc["diagnoses"], "diagnoses", where)
    seconds = doc["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise _fail(where, "'seconds' must be a number")
    result = SmokeResult(
        id=_str(doc, "id", where),
        tag=_str(doc, "tag", where),
        verdict=verdict,
        gpu=gpu,
        seconds=float(seconds),
        tests=tests,
        failures=tuple(failures),
        diagnoses=tuple({str(k): v if isinstance(v, str) else str(v) for k, v in d.items()} for d in diagnoses),
        probe=_probe(doc["probe"], where),
        date=_str(doc, "date", where),
        cuda_checks=_dicts(doc["cuda_checks"], "cuda_checks", where),
        content_hash=_str(doc, "content_hash", where),
        image_id=_str(doc, "image_id", where),
        host=_dict(doc["host"], "host", where),
        returncode=_int(doc["returncode"], "returncode", where),
        vendor=vendor,
    )
    recomputed = verdict_of(result.returncode, tests, bool(gpu["attached"]), vendor)
    if verdict != "not-built" and verdict != recomputed:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(tests.items()))
        raise UserError(
            f"refused: its verdict {verdict!r} is not what its own contents give ({recomputed!r}: exit {result.returncode}, {counts}); {RERUN}",
            where,
        )
    return result
