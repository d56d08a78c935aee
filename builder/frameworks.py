"""The frameworks this project ships, in one registry: each name maps to the module that implements
it (builder.compat.rules.Framework); everything per framework is read from that implementation or
checked against the registry by tests/test_registry.py.

Adding a framework touches these places, and the registry test names the one that was forgotten:
1. an entry below;
2. its implementation: `builder/compat/rules/<name>.py` defines `FRAMEWORK`, a
   `builder.compat.rules.Framework`: its compat section (keys, loader) and decision, its index
   projects and what their metadata says of the build, its table rows for new releases, what its
   probe report says of a built image (`gpu_arch=True` there says gpu_arch.yaml must have rows for it);
3. its facts: the `<name>:` section of `builder/compat/data/compat.yaml` (with sources);
4. its Dockerfile partial: `templates/frameworks/<name>.j2`;
5. its check in the in-image probe: `builder/probes/hello_gpu.py` (CHECKS and DIST_NAMES; the probe
   is stdlib-only and runs alone inside images, so it keeps its own copy of the names);
6. optionally its compute capabilities per wheel variant: `builder/compat/data/gpu_arch.yaml`.

No code outside its own module branches on a framework's name. The registry in force (these plus
any added for a while with builder.compat.rules.registered) is builder.compat.rules.registry().
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str
    module: str  # defines FRAMEWORK, the name's builder.compat.rules.Framework


def _shipped(name: str) -> Entry:
    return Entry(name, f"builder.compat.rules.{name}")


REGISTRY: tuple[Entry, ...] = (_shipped("torch"), _shipped("tensorflow"), _shipped("jax"), _shipped("cupy"), _shipped("numba"))
NAMES: tuple[str, ...] = tuple(f.name for f in REGISTRY)
