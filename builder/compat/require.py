"""An image's NVIDIA_REQUIRE_CUDA judged as the container runtime judges it at `docker run --gpus all` (pure).

The NVIDIA Container Toolkit passes every `NVIDIA_REQUIRE_*` variable of the image (but
NVIDIA_REQUIRE_JETPACK) to `nvidia-container-cli configure --require=...`, each one a requirement that
must hold; `NVIDIA_DISABLE_REQUIRE=true` drops them all (nvidia-container-toolkit
internal/config/image/cuda_image.go). libnvidia-container's grammar (src/cli/dsl.c, src/cli/configure.c):

- a requirement is clauses separated by spaces, any one of which must hold (OR); a clause is
  conditions separated by commas, all of which must hold (AND);
- a condition is `name op value`, op one of `=`, `!=`, `<`, `<=`, `>`, `>=`; the names are `cuda` (the
  CUDA version the driver reports, nvmlSystemGetCudaDriverVersion as major.minor), `driver` (the
  driver version), `arch` (the GPU's compute capability) and `brand` (the GPU's product brand, compared
  without regard to case); versions compare number by number;
- it is judged for every GPU the container gets, each of which must satisfy it; with no GPU, `arch`
  and `brand` hold.

So `cuda>=13.2` refuses a driver of the R580 branch (CUDA 13.0) even though CUDA 13.2's runtime runs
on it by minor-version compatibility, and `brand=tesla,driver>=535,driver<536` lets a data-center GPU
on R535 start an image whose `cuda>=` clause its driver fails (the nvidia/cuda bases carry the
forward-compat package for those branches). Facts the caller does not know (no driver given, a GPU of
unknown brand) make a condition unknown, never a guessed yes: three-valued logic throughout.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from builder.compat.facts import Compat
from builder.model.versions import release_tuple

Name = Literal["cuda", "driver", "arch", "brand"]
NAMES: tuple[Name, ...] = ("cuda", "driver", "arch", "brand")
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_VERSION = re.compile(r"^[0-9.]+$")
MAX_REQUIREMENT = 8192  # characters; the nvidia/cuda 13.0 images' value is ~2,300

# The GPU brands libnvidia-container names (driver.c, from NVML's nvmlBrandType_t; toolkit >= 1.9.0
# names the newer brands, older ones call them "Unknown": NVIDIA/nvidia-container-toolkit#24), and
# what `nvidia-smi -q` prints as "Product Brand" for each, spaces dropped and lower-cased.
BRANDS: dict[str, str] = {
    "unknown": "unknown",
    "quadro": "quadro",
    "tesla": "tesla",
    "nvs": "nvs",
    "grid": "grid",
    "geforce": "geforce",
    "titan": "titan",
    "nvidiavirtualapplications": "vapps",
    "nvidiavirtualpc": "vpc",
    "nvidiavirtualcomputeserver": "vcs",
    "nvidiartxvirtualworkstation": "vws",
    "nvidiacloudgaming": "cloudgaming",
    "quadrortx": "quadrortx",
    "nvidiartx": "nvidiartx",
    "nvidia": "nvidia",
    "geforcertx": "geforcertx",
    "titanrtx": "titanrtx",
}
BRAND_NAMES: tuple[str, ...] = tuple(sorted(set(BRANDS.values())))

Truth = bool | None  # None: not known from the facts given


class RequirementError(ValueError):
    """A requirement libnvidia-container would refuse as an invalid expression; the message says which part."""


@dataclass(frozen=True)
class Condition:
    name: Name
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


@dataclass(frozen=True)
class Requirement:
    """One NVIDIA_REQUIRE_* value: clauses (OR) of conditions (AND)."""

    text: str
    clauses: tuple[tuple[Condition, ...], ...]

    @property
    def cuda(self) -> str | None:
        """The CUDA version its first clause asks the driver for (`cuda>=13.2` -> 13.2), as the toolkit's error names it."""
        first = self.clauses[0] if self.clauses else ()
        return next((c.value for c in first if c.name == "cuda" and c.op in (">=", ">", "=")), None)

    @property
    def forward_compat(self) -> tuple[str, ...]:
        """The clauses other than the first (nvidia/cuda's `brand=...,driver>=N,driver<N+1`), as text."""
        return tuple(",".join(map(str, clause)) for clause in self.clauses[1:])


def parse(text: str) -> Requirement:
    """The requirement as libnvidia-container reads it; RequirementError where it would say "invalid expression"."""
    if len(text) > MAX_REQUIREMENT:
        raise RequirementError(f"{len(text)} characters (at most {MAX_REQUIREMENT})")
    clauses = []
    for clause_text in text.split(" "):
        conditions = [_condition(part) for part in clause_text.split(",") if part]
        if conditions:
            clauses.append(tuple(conditions))
    return Requirement(text, tuple(clauses))


def _condition(text: str) -> Condition:
    match = re.fullmatch(r"([^<>=!]+)([<>=!]+)(.*)", text)
    if match is None:
        raise RequirementError(f"{text[:60]!r} is not name<op>value")
    name, op, value = match.group(1).lower(), match.group(2), match.group(3)
    if op not in OPERATORS:
        raise RequirementError(f"{text[:60]!r}: {op!r} is not one of {' '.join(OPERATORS)}")
    if not value:
        raise RequirementError(f"{text[:60]!r} has no value")
    if name not in NAMES:
        raise RequirementError(f"{text[:60]!r}: {name[:20]!r} is not one of {', '.join(NAMES)}")
    if name == "brand":
        if op not in ("=", "!="):
            raise RequirementError(f"{text[:60]!r}: a brand compares with = or != only")
    elif not _VERSION.fullmatch(value) or not any(ch.isdigit() for ch in value):
        raise RequirementError(f"{text[:60]!r}: {value[:20]!r} is not a version of digits and dots")
    return Condition(name, op, value)


# --- the host as the runtime sees it ----------------------------------------------------------


@dataclass(frozen=True)
class CudaBounds:
    """The CUDA version a driver reports, as far as the toolkit table knows it: exact when both ends
    are equal; a driver of a branch the table does not list lies between its neighbours, below the
    newer one's (a CUDA minor comes with the branch it shipped with: R565 reports 12.7, under R570's 12.8)."""

    low: tuple[int, ...] | None
    high: tuple[int, ...] | None
    below_high: bool = False  # the version is less than `high`, not at most

    @property
    def exact(self) -> str | None:
        return _text(self.low) if self.low is not None and self.low == self.high else None

    def __str__(self) -> str:
        if self.exact:
            return self.exact
        if self.low is not None and self.high is not None:
            return f"{_text(self.low)} or newer, below {_text(self.high)}" if self.below_high else f"{_text(self.low)}-{_text(self.high)}"
        if self.low is not None:
            return f"{_text(self.low)} or newer"
        return f"below {_text(self.high)}" if self.high is not None else "unknown"


@dataclass(frozen=True)
class Device:
    """One GPU the container gets: its compute capability and libnvidia-container brand, where known."""

    arch: str | None
    brand: str | None


@dataclass(frozen=True)
class Host:
    driver: str | None  # as nvidia-smi reports it; None: not known
    devices: tuple[Device, ...] | None  # None: not known which GPUs (judged as one GPU of unknown arch and brand)


def branch(driver: str) -> int | None:
    """A driver version's branch: 580.65.06 -> 580."""
    release = release_tuple(driver)
    return release[0] if release else None


def driver_cuda(driver: str, compat: Compat) -> CudaBounds:
    """The CUDA version `driver` reports: that of the toolkit releases its branch shipped with (compat.yaml
    cuda.toolkits, NVIDIA's Table 3); for a branch no toolkit shipped with, between the neighbours'."""
    own = branch(driver)
    by_branch: dict[int, tuple[int, ...]] = {}
    for cuda, shipped in compat.cuda_toolkits:
        b = branch(shipped)
        if b is not None:
            by_branch[b] = max(by_branch.get(b, ()), release_tuple(cuda)[:2])
    if own is None:
        return CudaBounds(None, None)
    if own in by_branch:
        return CudaBounds(by_branch[own], by_branch[own])
    below = [cuda for b, cuda in by_branch.items() if b < own]
    above = [cuda for b, cuda in by_branch.items() if b > own]
    return CudaBounds(max(below) if below else None, min(above) if above else None, below_high=bool(above))


# --- judging ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    holds: Truth  # True: the runtime starts it; False: it refuses it; None: depends on what is not known
    clause: str  # the clause that holds (True), the one the runtime's error names (False), or what is missing (None)
    unknown: tuple[str, ...] = ()  # what was not known, for a None


def judge(requirement: Requirement, host: Host, compat: Compat) -> Judgement:
    """Does the runtime start an image with this requirement on `host`? Each GPU must satisfy it."""
    if not requirement.clauses:
        return Judgement(True, "no condition")
    # No GPU visible: judged once, `arch` and `brand` holding (None); GPUs not known: one of unknown arch and brand.
    devices: Sequence[Device | None] = (None,) if host.devices == () else host.devices or (Device(None, None),)
    cuda = driver_cuda(host.driver, compat) if host.driver else None
    results = [_any(requirement, host.driver, cuda, device) for device in devices]
    if all(r[0] is True for r in results):
        return Judgement(True, results[0][1])
    refused = next((r for r in results if r[0] is False), None)
    if refused is not None:
        first = ",".join(map(str, requirement.clauses[0]))
        return Judgement(False, first)
    missing = tuple(dict.fromkeys(name for r in results for name in r[2]))
    return Judgement(None, results[0][1], missing)


def _any(requirement: Requirement, driver: str | None, cuda: CudaBounds | None, device: Device | None) -> tuple[Truth, str, list[str]]:
    """One GPU: (does some clause hold, that clause or the first undecided one, the facts missing)."""
    undecided: list[tuple[Condition, ...]] = []
    missing: list[str] = []
    for clause in requirement.clauses:
        values = [_condition_holds(c, driver, cuda, device, missing) for c in clause]
        if all(v is True for v in values):
            return True, ",".join(map(str, clause)), []
        if not any(v is False for v in values):
            undecided.append(clause)
    if undecided:
        return None, ",".join(map(str, undecided[0])), missing
    return False, ",".join(map(str, requirement.clauses[0])), []


def _condition_holds(c: Condition, driver: str | None, cuda: CudaBounds | None, device: Device | None, missing: list[str]) -> Truth:
    if c.name == "driver":
        if driver is None:
            missing.append("the driver version")
            return None
        return _compare(release_tuple(driver), c.op, _numbers(c.value))
    if c.name == "cuda":
        if cuda is None:
            missing.append("the driver version")
            return None
        found = _bounded(cuda, c.op, _numbers(c.value))
        if found is None:
            missing.append(f"the CUDA version of driver {driver} (a branch the toolkit table does not list)")
        return found
    if device is None:
        return True  # no GPU: libnvidia-container assumes arch and brand hold
    if c.name == "arch":
        if device.arch is None:
            missing.append("the GPU's compute capability")
            return None
        return _compare(_numbers(device.arch), c.op, _numbers(c.value))
    if device.brand is None:
        missing.append("the GPU's product brand")
        return None
    same = device.brand.lower() == c.value.lower()
    return same if c.op == "=" else not same


def _numbers(text: str) -> tuple[int, ...]:
    parts = list(release_tuple(text))
    while parts and parts[-1] == 0:
        parts.pop()  # libnvidia-container: 12.0 equals 12
    return tuple(parts)


def _compare(have: tuple[int, ...], op: str, want: tuple[int, ...]) -> bool:
    have = _numbers(".".join(map(str, have)))
    return {
        "=": have == want,
        "!=": have != want,
        "<": have < want,
        "<=": have <= want,
        ">": have > want,
        ">=": have >= want,
    }[op]


def _bounded(bounds: CudaBounds, op: str, want: tuple[int, ...]) -> Truth:
    """A comparison of a CUDA version known only to lie within `bounds`: decided when both ends agree."""
    if bounds.low is not None and bounds.low == bounds.high and not bounds.below_high:
        return _compare(bounds.low, op, want)
    low = _compare(bounds.low, op, want) if bounds.low is not None else None
    high = None if bounds.high is None else _numbers(".".join(map(str, bounds.high)))
    if op in (">", ">="):  # holds for every version from low up; fails when even the top of the range does
        if low:
            return True
        if high is not None and (high < want or (high == want and (op == ">" or bounds.below_high))):
            return False
        return None
    if op in ("<", "<="):
        if high is not None and (high < want or (high == want and (op == "<=" or bounds.below_high))):
            return True
        return False if low is False else None
    return None


def _text(release: tuple[int, ...] | None) -> str:
    return ".".join(map(str, release)) if release else "?"


def brands_for(requirement: Requirement, driver: str) -> tuple[str, ...]:
    """The brands whose clauses this driver meets in every other condition: the GPUs it starts the
    image on through forward compatibility (`brand=tesla,driver>=535,driver<536` on R535)."""
    have = release_tuple(driver)
    out = []
    for clause in requirement.clauses:
        brands = [c.value.lower() for c in clause if c.name == "brand" and c.op == "="]
        others = [c for c in clause if c.name != "brand"]
        if brands and others and all(c.name == "driver" and _compare(have, c.op, _numbers(c.value)) for c in others):
            out += brands
    return tuple(dict.fromkeys(out))


def disabled(value: str | None) -> bool:
    """NVIDIA_DISABLE_REQUIRE as the toolkit reads it (Go's strconv.ParseBool): the checks are off when true."""
    return value is not None and value.strip() in ("1", "t", "T", "TRUE", "true", "True")
