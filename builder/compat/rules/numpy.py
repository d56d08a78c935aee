"""The NumPy pin of an image: the newest release every framework in it accepts."""

from __future__ import annotations

from builder.compat.facts import Compat
from builder.model.plan import Install
from builder.model.versions import in_range, mm


def pick_numpy(installs: tuple[Install, ...], python: str, compat: Compat) -> str | None:
    """Exact numpy version, None when no framework constrains it; ValueError with the clash."""
    lows = [(i.numpy_min, i.framework) for i in installs if i.numpy_min]
    highs = [(i.numpy_max, i.framework) for i in installs if i.numpy_max]
    if not highs:
        return None
    for version, pyrange in reversed(compat.numpy):
        if not in_range(python, pyrange):
            continue
        if all(mm(version) >= mm(low) for low, _ in lows) and all(mm(version) <= mm(high) for high, _ in highs):
            return version
    needs = [f"{fw} needs numpy >= {low}" for low, fw in lows] + [f"{fw} needs numpy <= {high}" for high, fw in highs]
    raise ValueError(f"no NumPy release with Python {python} wheels fits: {'; '.join(needs)}")
