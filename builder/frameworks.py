"""The frameworks this project knows, in one registry; everything per framework is derived from it
or checked against it by tests/test_registry.py.

Adding a framework touches these places, and the registry test names the one that was forgotten:
1. an entry below;
2. its rules: `builder/compat/rules/<name>.py` (facts loader `load`, `SECTION_KEYS`, `decide`);
3. its facts: the `<name>:` section of `builder/compat/data/compat.yaml` (with sources);
4. its Dockerfile partial: `templates/frameworks/<name>.j2`;
5. its check in the in-image probe: `builder/probes/hello_gpu.py` (CHECKS and DIST_NAMES; the probe
   is stdlib-only and runs alone inside images, so it keeps its own copy of the names);
6. optionally its compute capabilities per wheel variant: `builder/compat/data/gpu_arch.yaml`
   (`gpu_arch=True` below says the table must have rows for it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str
    gpu_arch: bool  # gpu_arch.yaml lists the compute capabilities its CUDA wheels ship kernels for


REGISTRY: tuple[Framework, ...] = (
    Framework("torch", gpu_arch=True),
    Framework("tensorflow", gpu_arch=False),
    Framework("jax", gpu_arch=True),
    Framework("cupy", gpu_arch=False),
    Framework("numba", gpu_arch=True),
)
NAMES: tuple[str, ...] = tuple(f.name for f in REGISTRY)
