"""`builder doctor`: what this host can run (its engine, GPUs, driver and runtime checked, a verdict
per planned image); and with `--image REF`: will a local image `builder build` labelled run on it?

The image's io.builder.* labels (builder/fit/labelled.py) are judged like a catalog record
(usecases/fit.py `judge`), for the host detected or described by the same options as `builder fit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from builder.compat.rules import table
from builder.engine.client import open_engine
from builder.engine.port import Connect
from builder.fit import host as fit_hosts
from builder.fit import labelled
from builder.fit.host import FitHost
from builder.fit.runs_on import RunsOn, runs_on
from builder.host import doctor, facts
from builder.model.amd_fit import AmdFit
from builder.model.plan import ImageSpec
from builder.usecases.fit import RecordFit, gfx_verdict, judge, judge_runs_on
from builder.util.errors import UserError
from builder.workspace import Workspace


@dataclass(frozen=True)
class ImageFit:
    ref: str
    image: labelled.LabelledImage
    host: FitHost
    fit: RecordFit
    runs_on: RunsOn

    @property
    def ok(self) -> bool:
        """Only a refusal fails: `unknown` says what was not checked, as `builder pull` does."""
        return self.fit.status != "does not fit"

    def to_json(self) -> dict[str, object]:
        return {
            "image": self.ref,
            "id": self.image.id,
            "host": self.host.to_json(),
            "fit": self.fit.to_json(),
            "runs_on": self.runs_on.to_json(),
        }


def image_fit(ref: str, host: FitHost, connect: Connect = open_engine, ws: Workspace | None = None) -> ImageFit:
    """The fit of the local image `ref` (a name, id or digest) for `host`; a missing or unlabelled image is a UserError.
    A ROCm image is judged from the AMD fit measured from its locked wheels (`ws`'s images/<id>/fit.json),
    where the planned image of its id has the content hash it was built from: that fit is the image's."""
    info = connect().inspect_image(ref)
    if info is None:
        raise UserError(f"--image {ref}: no such local image; build it (`builder build`) or pull it (`builder pull`) first")
    image = labelled.from_labels(ref, info.labels)
    record = labelled.as_record(image)
    if record.accelerator.kind == "rocm" and ws is not None:
        record = dataclasses.replace(record, amd=planned_amd(ws, image))
    compat = table()
    if image.runs_on is not None:  # measured from its locked wheels when it was rendered
        found = runs_on(record, compat)
        measured = RunsOn(f"sm {' '.join(image.runs_on) or 'none'}", found.driver, found.arch, "measured")
        return ImageFit(ref, image, host, judge_runs_on(record, image.runs_on, host, compat), measured)
    return ImageFit(ref, image, host, judge(record, host, compat), runs_on(record, compat))


def planned_amd(ws: Workspace, image: labelled.LabelledImage) -> AmdFit | None:
    """The AMD fit of the planned image `image` was built from (same id and content hash); None when there is none."""
    if not image.content_hash or not ws.matrix_path.exists():
        return None
    same = [spec for spec in ws.decided.images if spec.id == image.id]
    hashed = ws.hashed(tuple(same))  # only this image is rendered for its content hash
    spec = next((s for s in hashed if s.content_hash == image.content_hash), None)
    return spec.locked_fit.amd if spec is not None and spec.locked_fit is not None else None


@dataclass(frozen=True)
class HostReport:
    host: facts.HostInfo
    checks: tuple[doctor.Check, ...]
    verdicts: tuple[doctor.ImageVerdict, ...]  # one per selected planned image (none without a matrix)

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks) and not any(v.status == "fail" for v in self.verdicts)

    def to_json(self) -> dict[str, object]:
        return doctor.report_json(self.host, self.checks, self.verdicts)


def host_report(ws: Workspace, select: str | None, gfx: Callable[[], tuple[str, ...]] = fit_hosts.amd_targets) -> HostReport:
    """The host's checks and a verdict per planned image `select` picks (all by default); a ROCm
    image's code objects are judged on this host's gfx targets (`gfx`: the kfd topology's)."""
    host = facts.gather()
    checks = doctor.host_checks(host)
    images: Sequence[ImageSpec] = ws.selected(select, use_default=False) if ws.matrix_path.exists() else ()
    return HostReport(host, tuple(checks), tuple(doctor.image_verdicts(host, images, amd_judge(host, gfx))))


def amd_judge(host: facts.HostInfo, gfx: Callable[[], tuple[str, ...]]) -> doctor.GfxJudge:
    """The gfx finding doctor gives each ROCm image: what it runs on and, where this host has /dev/kfd,
    its code objects against the host's gfx targets (usecases/fit.py gfx_verdict)."""
    targets = gfx() if host.amd.present else ()
    amd = FitHost(fit_hosts.cpu_arch(facts.host_machine(host)), "amd", targets, None, ("arch", "vendor", "gpus"))
    compat = table()
    return lambda spec: gfx_verdict(spec, amd, compat)
