"""The GPU acceptance check (issue 39): on an NVIDIA host, with or without Docker, does every verdict
the project gives equal what the GPU does? Run by scripts/gpu-check.sh with the Python that has the
frameworks; it writes one JSON summary (and the raw outputs beside it) and exits 0 only when all held.

Steps (each a real command of the project, run as a user runs it, from this copy of the repository):
- probe: `builder probe --json --require-gpu`, natively: every installed framework must pass on the GPU;
- fit: `builder fit --library DIR` over every folder of installed packages that holds device code,
  with both readers (builder's fatbin reader and NVIDIA's cuobjdump): the two answers must be equal, and
  no library of a framework that passed the probe (or of NVIDIA's wheels it loads) may be called
  "does not fit" on this GPU;
- doctor: `builder doctor --format json`: the driver and every GPU nvidia-smi lists are seen, and no
  GPU image is offered emulation as its fix;
- probe-tests: tests/test_probe.py run by this Python (the frameworks installed in it must not leak in);
- slice: with Docker and the NVIDIA runtime, `builder build` and `builder test --gpu require` of the
  CUDA-from-wheels slice; without them it is skipped, and the summary says why.

No GPU (nvidia-smi absent, failing or listing none) is `no-gpu`, exit 3, whatever the steps did:
nothing ran on a GPU, so nothing here is a pass.

    python3 scripts/gpu_check.py [--out DIR] [--steps probe,fit,doctor,probe-tests,slice] [--library DIR ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.fit import fatbin  # noqa: E402
from builder.frameworks import NAMES  # noqa: E402
from builder.host import facts  # noqa: E402
from builder.probes import hello_gpu  # noqa: E402

SCHEMA = 1
STEPS = ("probe", "fit", "doctor", "probe-tests", "slice")
SLICE = "base=cuda1*-debian12"  # the CUDA-from-wheels images (docs/gpu-validation.md)
NVIDIA = "nvidia"  # the namespace of NVIDIA's wheels: every framework loads from it
EXIT = {"pass": 0, "fail": 1, "no-gpu": 3}
MAX_FOLDER_FILES = 200_000


@dataclass
class Step:
    name: str
    status: str = "skipped"  # passed, failed, skipped
    detail: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 1), **self.data}


@dataclass(frozen=True)
class Ran:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def log(message: str) -> None:
    print(f"gpu-check: {message}", file=sys.stderr, flush=True)


def environment() -> dict[str, str]:
    """This Python's environment, with the repository first on PYTHONPATH (carried wheels stay after it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def run(argv: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> Ran:
    started = time.monotonic()
    try:
        done = subprocess.run(list(argv), cwd=ROOT, env=env or environment(), capture_output=True, text=True, timeout=timeout, check=False)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = 124, _text(exc.stdout), _text(exc.stderr) + f"\ntimed out after {timeout:g} s"
    except OSError as exc:
        code, out, err = 127, "", str(exc)
    return Ran(list(argv), code, out, err, time.monotonic() - started)


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def builder(*args: str) -> list[str]:
    return [sys.executable, "-m", "builder", *args]


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


# --- the host ---------------------------------------------------------------------------------


def host_facts() -> tuple[dict[str, Any], str | None]:
    """What this host is, and why it has no usable NVIDIA GPU (None when it has one)."""
    nvidia = facts.gather_nvidia()
    docker = run(["docker", "info", "--format", "{{json .Runtimes}}"], 30) if shutil.which("docker") else None
    runtimes = sorted(json.loads(docker.stdout)) if docker and docker.returncode == 0 and docker.stdout.strip().startswith("{") else []
    host = {
        "gpus": [{"index": g.index, "name": g.name, "compute_capability": g.compute_cap, "memory_mib": g.memory_mib} for g in nvidia.gpus],
        "driver": nvidia.driver,
        "nvidia_smi": nvidia.status,
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "docker": bool(docker and docker.returncode == 0),
        "docker_runtimes": runtimes,
    }
    if nvidia.status != "ok" or not nvidia.gpus:
        why = {"absent": "nvidia-smi not found", "no_devices": "nvidia-smi lists no GPU"}.get(
            nvidia.status, nvidia.error or "nvidia-smi failed"
        )
        return host, f"no NVIDIA GPU on this host ({why})"
    return host, None


def versions() -> dict[str, Any]:
    """The installed frameworks, NumPy and NVIDIA's wheels (read from their metadata, nothing imported),
    and the revision of this copy of the repository."""
    found = {kind: hello_gpu.dists(kind) for kind in hello_gpu.DIST_NAMES}
    nvidia = {
        name: dist.version
        for dist in importlib.metadata.distributions()
        if (name := re.sub(r"[-_.]+", "-", str(dist.metadata["Name"] or "")).lower()).startswith(("nvidia-", "cuda-"))
    }
    git = run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], 30) if shutil.which("git") else None
    revision = os.environ.get("GPU_CHECK_REVISION") or (
        git.stdout.strip() if git and git.returncode == 0 else "unknown (a copy without .git)"
    )
    return {"revision": revision, "frameworks": found, "numpy": hello_gpu.dist_version("numpy"), "nvidia": dict(sorted(nvidia.items()))}


# --- the steps --------------------------------------------------------------------------------


def probe_step(out: Path, step: Step) -> dict[str, Any]:
    ran = run(builder("probe", "--json", "--require-gpu", "--timeout", "180"), 1200)
    (out / "probe.json").write_text(ran.stdout, encoding="utf-8")
    (out / "probe.stderr.txt").write_text(ran.stderr, encoding="utf-8")
    step.seconds = ran.seconds
    try:
        report = json.loads(ran.stdout)
    except ValueError:
        step.status, step.detail = "failed", f"exit {ran.returncode}, no JSON: {last_line(ran.stderr)}"
        return {}
    results = report.get("frameworks", {})
    step.data["frameworks"] = {
        name: {
            "status": r.get("status"),
            "version": r.get("version"),
            "devices": r.get("devices"),
            "reason": r.get("reason"),
            "diagnosis": r.get("diagnosis"),
            "seconds": r.get("seconds"),
        }
        for name, r in results.items()
    }
    passed = [name for name, r in results.items() if r.get("status") == "passed"]
    bad = [f"{name}: {r.get('reason')}" for name, r in results.items() if r.get("status") not in ("passed", "not-installed")]
    step.status = "passed" if ran.returncode == 0 and passed and not bad else "failed"
    step.detail = f"passed on the GPU: {', '.join(passed) or 'none'}" + (f"; not passed: {'; '.join(bad)}" if bad else "")
    return {name: r for name, r in results.items()}


def device_code_folders(given: Sequence[Path]) -> list[Path]:
    """The folders whose libraries `fit --library` reads: the given ones, else every top-level folder of
    the site-packages the installed frameworks (and NVIDIA's wheels) live in that holds a library with
    device code (found with the bounded fatbin reader, headers only)."""
    if given:
        return list(given)
    roots: set[Path] = set()
    for name in (*NAMES, NVIDIA):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots.add(Path(location).resolve().parent)
    folders = []
    for root in sorted(roots):
        for entry in sorted(root.iterdir()):
            if entry.is_dir() and not entry.name.endswith((".dist-info", ".egg-info", "__pycache__")) and _has_device_code(entry):
                folders.append(entry)
    return folders


def _has_device_code(folder: Path) -> bool:
    seen = 0
    for base, _, files in os.walk(folder):
        seen += len(files)
        if seen > MAX_FOLDER_FILES:
            return True  # let `fit --library` refuse it in its own words
        for name in files:
            if name.endswith(".so") or ".so." in name:
                try:
                    code = fatbin.read(Path(base) / name)
                except (fatbin.NotElf, fatbin.Bounded, OSError):
                    continue
                if code.sass or code.ptx:
                    return True
    return False


def fit_step(out: Path, step: Step, folders: Sequence[Path], probe: dict[str, Any]) -> None:
    """Both readers on each folder, in parallel (cuobjdump takes seconds per large library)."""
    if not folders:
        step.status, step.detail = "failed", "no installed library with device code was found"
        return
    env = environment()
    if not os.environ.get("BUILDER_CUOBJDUMP") and not shutil.which("cuobjdump") and Path("/usr/local/cuda/bin/cuobjdump").is_file():
        env["BUILDER_CUOBJDUMP"] = "/usr/local/cuda/bin/cuobjdump"  # the toolkit's, when no wheel's is carried
    jobs = [(folder, reader) for folder in folders for reader in ("fatbin", "cuobjdump")]
    workers = max(1, min(len(jobs), (os.cpu_count() or 2) // 2))
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        ran = dict(
            zip(
                jobs,
                pool.map(lambda job: run(builder("fit", "--library", str(job[0]), "--reader", job[1], "--format", "json"), 900, env), jobs),
                strict=True,
            )
        )
    raw: dict[str, Any] = {}
    results = []
    for folder in folders:
        answers = {reader: _fit_answer(ran[(folder, reader)]) for reader in ("fatbin", "cuobjdump")}
        raw[str(folder)] = {reader: ran[(folder, reader)].stdout or ran[(folder, reader)].stderr for reader in answers}
        if "error" in answers["cuobjdump"] and "records" in answers["fatbin"]:
            answers["cuobjdump"] = _file_by_file(folder, answers["fatbin"]["records"], env)
        results.append(_compare(folder, answers, probe))
    step.seconds = time.monotonic() - started
    (out / "fit.json").write_text(json.dumps(raw, indent=1, sort_keys=True), encoding="utf-8")
    step.data["folders"] = results
    failed = [r for r in results if r["problems"]]
    libraries = sum(r["libraries"] for r in results)
    step.status = "failed" if failed else "passed"
    step.detail = (
        f"{libraries} libraries in {len(results)} folders: both readers agree, and nothing a passing framework loads is refused"
        if not failed
        else "; ".join(f"{r['folder']}: {r['problems'][0]}" for r in failed[:5])
    )


def _file_by_file(folder: Path, rows: Sequence[dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    """cuobjdump refused something in the folder (its `fit --library` stops at the first refusal):
    each library the fatbin reader listed, read by both readers on its own. A library cuobjdump
    cannot read ("Invalid ELF file" on some of CUDA 13.2's) has nothing to compare; it is listed."""
    from builder.fit import cuobjdump
    from builder.util.errors import RunFailure

    binary = cuobjdump.find_binary(env)
    paths = [folder / row["id"] for row in rows]

    def both(path: Path) -> tuple[str, str | None]:
        try:
            theirs = cuobjdump.measure(path, binary)
        except RunFailure as exc:
            return "refused", str(exc)
        return ("equal", None) if theirs == fatbin.read(path) else ("differ", f"fatbin {fatbin.read(path).label}; cuobjdump {theirs.label}")

    with concurrent.futures.ThreadPoolExecutor(max(1, (os.cpu_count() or 2) // 2)) as pool:
        found = dict(zip(paths, pool.map(both, paths), strict=True))
    differ = [f"{p.relative_to(folder)}: {why}" for p, (how, why) in found.items() if how == "differ"]
    refused = [f"{p.relative_to(folder)}: {why}" for p, (how, why) in found.items() if how == "refused"]
    return {"records": list(rows), "file_by_file": True, "differ": differ, "refused_by_cuobjdump": refused}


def _fit_answer(ran: Ran) -> dict[str, Any]:
    try:
        doc = json.loads(ran.stdout)
    except ValueError:
        return {"exit": ran.returncode, "error": last_line(ran.stderr) or "no output", "seconds": round(ran.seconds, 1)}
    return {"exit": ran.returncode, "records": doc.get("records", []), "seconds": round(ran.seconds, 1)}


def _compare(folder: Path, answers: dict[str, dict[str, Any]], probe: dict[str, Any]) -> dict[str, Any]:
    """One folder: the readers' rows equal, and no library of a framework that ran on this GPU refused."""
    problems = [f"{reader}: {a['error']}" for reader, a in answers.items() if "error" in a]
    rows = answers["fatbin"].get("records", [])
    problems += [f"the readers disagree on {d}" for d in answers["cuobjdump"].get("differ", [])[:5]]
    if not problems and rows != answers["cuobjdump"].get("records", []):
        other = {r["id"]: r for r in answers["cuobjdump"]["records"]}
        differ = [r["id"] for r in rows if other.get(r["id"]) != r] + [i for i in other if i not in {r["id"] for r in rows}]
        problems.append(f"the readers disagree on {len(differ)} libraries: {', '.join(differ[:5])}")
    ran_here = [name for name, r in probe.items() if r.get("status") == "passed"]
    owners = ran_here if folder.name == NVIDIA else [name for name in ran_here if folder.name == name]
    refused = [r for r in rows if r.get("status") == "does not fit"]
    if owners and refused:
        problems.append(
            f"{', '.join(owners)} passed on this GPU, but `fit` says {len(refused)} of its libraries do not fit: "
            + "; ".join(f"{r['id']}: {r['reason']}" for r in refused[:3])
        )
    return {
        "folder": str(folder),
        "libraries": len(rows),
        "statuses": {s: sum(r.get("status") == s for r in rows) for s in ("fits", "does not fit", "unknown")},
        "owners": owners,
        "refused": [{"id": r["id"], "reason": r["reason"]} for r in refused[:20]],
        "unknown": [{"id": r["id"], "reason": r["reason"]} for r in rows if r.get("status") == "unknown"][:20],
        "seconds": {reader: a.get("seconds") for reader, a in answers.items()},
        "refused_by_cuobjdump": answers["cuobjdump"].get("refused_by_cuobjdump", []),
        "problems": problems,
    }


def doctor_step(out: Path, step: Step, host: dict[str, Any]) -> None:
    ran = run(builder("doctor", "--format", "json"), 600)
    (out / "doctor.json").write_text(ran.stdout or ran.stderr, encoding="utf-8")
    step.seconds = ran.seconds
    try:
        report = json.loads(ran.stdout)
    except ValueError:
        step.status, step.detail = "failed", f"exit {ran.returncode}, no JSON: {last_line(ran.stderr)}"
        return
    checks = {c["name"]: c for c in report.get("checks", [])}
    problems = []
    driver = checks.get("nvidia driver", {})
    if driver.get("status") != "ok" or (host["driver"] and host["driver"] not in driver.get("detail", "")):
        problems.append(f"nvidia driver: {driver.get('status')}: {driver.get('detail')}")
    for gpu in host["gpus"]:
        seen = checks.get(f"gpu {gpu['index']}", {})
        if seen.get("status") != "ok" or f"compute capability {gpu['compute_capability']}" not in seen.get("detail", ""):
            problems.append(f"gpu {gpu['index']}: {seen.get('status')}: {seen.get('detail')}")
    emulated = [i["image"] for i in report.get("images", []) if i.get("vendor") != "cpu" and re.search(r"binfmt|qemu", i.get("fix", ""))]
    if emulated:
        problems.append(f"GPU images offered emulation as their fix: {', '.join(emulated[:3])}")
    step.data.update(checks=report.get("checks"), summary=report.get("summary"), exit=ran.returncode)
    step.status = "failed" if problems else "passed"
    step.detail = "; ".join(problems) or f"driver {host['driver']} and {len(host['gpus'])} GPU(s) seen; images: {report.get('summary')}"


def probe_tests_step(out: Path, step: Step) -> None:
    workers = ["-n", str(min(8, os.cpu_count() or 1))] if importlib.util.find_spec("xdist") else []
    ran = run([sys.executable, "-m", "pytest", "tests/test_probe.py", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *workers], 1200)
    (out / "probe-tests.txt").write_text(ran.stdout + ran.stderr, encoding="utf-8")
    step.seconds = ran.seconds
    step.status = "passed" if ran.returncode == 0 else "failed"
    step.detail = last_line(ran.stdout) or last_line(ran.stderr)


def slice_step(out: Path, step: Step, host: dict[str, Any]) -> None:
    if not host["docker"]:
        step.detail = "no Docker engine on this host (the in-container GPU run needs one)"
        return
    if not any(name.startswith("nvidia") for name in host["docker_runtimes"]):
        step.detail = "the Docker engine has no nvidia runtime (install the NVIDIA Container Toolkit)"
        return
    log(f"building and testing the CUDA slice ({SLICE}); this takes a while")
    built = run(builder("build", "-j", "2", "--select", SLICE), 7200)
    tested = run(builder("test", "--gpu", "require", "--select", SLICE), 7200) if built.returncode == 0 else None
    (out / "slice.txt").write_text(built.stdout + built.stderr + (tested.stdout + tested.stderr if tested else ""), encoding="utf-8")
    step.seconds = built.seconds + (tested.seconds if tested else 0)
    step.status = "passed" if tested is not None and tested.returncode == 0 else "failed"
    step.detail = last_line(tested.stdout + tested.stderr) if tested else f"build failed: {last_line(built.stderr)}"


# --- the whole check --------------------------------------------------------------------------


def check(out: Path, steps: Sequence[str], libraries: Sequence[Path]) -> dict[str, Any]:
    started = time.monotonic()
    host, no_gpu = host_facts()
    if no_gpu:
        log(f"NO GPU: {no_gpu}; the steps below run, but nothing runs on a GPU and the result is not a pass")
    else:
        gpus = ", ".join(f"{g['name']} ({g['compute_capability']})" for g in host["gpus"])
        log(f"{len(host['gpus'])} GPU(s): {gpus}, driver {host['driver']}")
    done: list[Step] = []
    probe: dict[str, Any] = {}

    def stage(name: str, work: Callable[[Step], object]) -> None:
        step = Step(name)
        if name not in steps:
            step.detail = "not asked for (--steps)"
        else:
            log(f"{name} ...")
            work(step)
            log(f"{name}: {step.status}: {step.detail}")
        done.append(step)

    def probe_work(step: Step) -> None:
        probe.update(probe_step(out, step))

    stage("probe", probe_work)
    stage("fit", lambda step: fit_step(out, step, device_code_folders(libraries), probe))
    stage("doctor", lambda step: doctor_step(out, step, host))
    stage("probe-tests", lambda step: probe_tests_step(out, step))
    stage("slice", lambda step: slice_step(out, step, host))
    failed = [s.name for s in done if s.status == "failed"]
    unasked = [s.name for s in done if s.name not in steps]
    if no_gpu:
        result, reason = "no-gpu", f"{no_gpu}: nothing ran on a GPU, so this is not a pass"
    elif failed:
        result, reason = "fail", f"failed: {', '.join(failed)}"
    elif unasked:
        result, reason = "fail", f"not every step was asked for ({', '.join(unasked)} left out): a partial check is not a pass"
    else:
        skipped = [f"{s.name} ({s.detail})" for s in done if s.status == "skipped"]
        result, reason = "pass", "every step passed" + (f"; skipped: {'; '.join(skipped)}" if skipped else "")
    return {
        "check": "gpu-check",
        "schema": SCHEMA,
        "result": result,
        "reason": reason,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "host": host,
        "versions": versions(),
        "steps": [s.to_json() for s in done],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check", help="folder for summary.json and the raw outputs")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)} (a subset is never a pass)")
    parser.add_argument("--library", type=Path, action="append", default=[], help="a folder for the fit step instead of those found")
    args = parser.parse_args(argv)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        parser.error(f"--steps: unknown {unknown or args.steps!r}; choose from {','.join(STEPS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    summary = check(args.out, steps, args.library)
    path = args.out / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    label = {"pass": "PASS", "fail": "FAIL", "no-gpu": "NO GPU (not a pass)"}[summary["result"]]
    print(f"gpu-check: {label}: {summary['reason']}\nsummary: {path}", flush=True)
    return EXIT[summary["result"]]


if __name__ == "__main__":
    sys.exit(main())
