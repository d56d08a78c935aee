"""What is installed inside an image, read from the image itself: every Python distribution of the
interpreter on its PATH (the image's venv) and every Debian package dpkg knows, in a locked-down
container of the approved image id (the smoke container's settings: no network, no capabilities,
read-only root). The SBOM is made of this, so it says what the image holds, not what was planned."""

from __future__ import annotations

from dataclasses import dataclass, replace

from packaging.utils import canonicalize_name

from builder.engine.port import Engine, EngineFault
from builder.host.facts import HostInfo
from builder.model.plan import ImageSpec
from builder.smoke.args import gpu_access, run_spec
from builder.util.errors import RunFailure

PYTHON_SECTION = "## python"
DPKG_SECTION = "## dpkg"
# importlib.metadata of the interpreter on PATH (the venv's: PATH=/opt/venv/bin:...), tab-separated;
# a distribution without a name (a broken install) is listed as "?" so it cannot hide.
INVENTORY_SCRIPT = (
    f"set -e; echo '{PYTHON_SECTION}'; "
    "python -c 'import importlib.metadata as m\n"
    'for d in m.distributions(): print(d.metadata["Name"] or "?", d.version or "?", sep="\\t")\'; '
    f"echo '{DPKG_SECTION}'; (dpkg-query -W -f '${{Package}}\\t${{Version}}\\t${{Architecture}}\\n' 2>/dev/null || true)"
)
MAX_ITEMS = 20_000


@dataclass(frozen=True)
class Distribution:
    name: str  # normalised (PEP 503), as the lock names it
    version: str


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str


@dataclass(frozen=True)
class Inventory:
    python: tuple[Distribution, ...]  # sorted by name
    dpkg: tuple[DebPackage, ...]  # sorted by name


def parse(text: str, where: str) -> Inventory:
    """The inventory script's output; RunFailure naming `where` when it is not that."""
    section = ""
    python: dict[str, Distribution] = {}
    debs: dict[tuple[str, str], DebPackage] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line in (PYTHON_SECTION, DPKG_SECTION):
            section = line
            continue
        if not line.strip():
            continue
        fields = line.split("\t")
        if section == PYTHON_SECTION and len(fields) == 2 and all(fields):
            name = canonicalize_name(fields[0])
            python[name] = Distribution(name, fields[1])
        elif section == DPKG_SECTION and len(fields) == 3 and fields[0] and fields[1]:
            debs[(fields[0], fields[2])] = DebPackage(fields[0], fields[1], fields[2])
        else:
            raise RunFailure(f"{where}: line {number} of the image's package listing is not 'name<TAB>version': {line[:80]!r}")
    if section == "" or len(python) + len(debs) > MAX_ITEMS:
        raise RunFailure(f"{where}: the image's package listing is empty or not a listing")
    return Inventory(tuple(sorted(python.values(), key=lambda d: d.name)), tuple(sorted(debs.values(), key=lambda d: (d.name, d.arch))))


def read_inventory(engine: Engine, spec: ImageSpec, image: str, host: HostInfo) -> Inventory:
    """The inventory of the image id `image`, read in a locked-down, tool-labelled container."""
    return parse(run_script(engine, spec, image, host, INVENTORY_SCRIPT, f"the packages of {spec.id} for its SBOM"), spec.id)


def run_script(engine: Engine, spec: ImageSpec, image: str, host: HostInfo, script: str, what: str) -> str:
    """What `sh -c script` prints in a locked-down container of the image id `image` (the smoke
    container's settings, no GPU, a tool label so a killed run's container is swept later, killed
    after 120 s); RunFailure "reading <what> failed ..." when it cannot run or exits non-zero."""
    command = ("timeout", "-s", "KILL", "120", "sh", "-c", script)
    locked_down = replace(run_spec(spec, gpu_access(spec, "off", host), host, 120), image=image, command=command)
    try:
        with engine.container(locked_down) as container:
            container.start()
            status = container.wait(timeout=180)
            output = container.logs().decode(errors="replace")
    except EngineFault as exc:
        raise RunFailure(f"reading {what} failed: {exc.message}") from None
    if status != 0:
        raise RunFailure(f"reading {what} failed (exit {status})")
    return output
