"""`newest:` entries: the newest N releases of each framework, per base, platform, stack and Python.

A hand-pinned `include` names one release and stays there when a newer one is published; a
`newest` entry names bases (any selector an `exclude` entry takes) and a count, and the plan keeps,
of the combinations the rules accept there, those whose every framework version is among that
framework's newest `releases` accepted versions. So the release `builder updates --apply` adds to
`frameworks:` replaces the oldest one in the slice with no include edited. A release the rules
refuse on a base (Python, glibc, CUDA) is skipped with its reason as every other combination and
does not count: the newest N are the newest N that install. The older accepted ones are skipped
naming the entry's line. An `include` still adds one exact combination on top (the release kept
for older GPUs, for example).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from packaging.version import Version

from builder.model.plan import Combination, ImageSpec, Matrix, Newest
from builder.spec.select import combination_fields
from builder.util.query import matches

Group = tuple[int, str, str, str, str]  # (entry, base, platform, stack, python)


class Keeper:
    """Holds back the accepted combinations a `newest` entry selects until all are known."""

    def __init__(self, matrix: Matrix) -> None:
        self.matrix = matrix
        self.groups: dict[Group, list[tuple[Combination, ImageSpec]]] = defaultdict(list)

    def entry(self, combo: Combination) -> int | None:
        """The first `newest` entry that selects the combination."""
        fields = combination_fields(combo)
        return next((i for i, newest in enumerate(self.matrix.newest) if matches(newest.rule.fields, fields)), None)

    def hold(self, combo: Combination, spec: ImageSpec) -> bool:
        """True when a `newest` entry decides this accepted combination (see `settle`)."""
        i = self.entry(combo)
        if i is None:
            return False
        self.groups[(i, combo.base.name, combo.platform, combo.stack, combo.python)].append((combo, spec))
        return True

    def settle(self) -> Iterator[tuple[Combination, ImageSpec | str]]:
        """Each held combination with its image (kept) or why it is not planned (older than the newest N)."""
        for (i, *_), members in self.groups.items():
            newest = self.matrix.newest[i]
            kept = newest_versions(newest, [combo for combo, _ in members])
            for combo, spec in members:
                if all(version in kept[name] for name, version in combo.frameworks):
                    yield combo, spec
                else:
                    yield combo, self.reason(newest, combo, kept)

    def reason(self, newest: Newest, combo: Combination, kept: dict[str, list[str]]) -> str:
        plural = "release" if newest.releases == 1 else f"{newest.releases} releases"
        planned = "; ".join(f"{name} {', '.join(kept[name])}" for name, _ in combo.frameworks)
        return (
            f"older than the newest {plural} of each framework that install on {combo.base.name} ({combo.platform}, Python "
            f"{combo.python}), which {self.matrix.path}:{newest.rule.line} plans ({planned}); an include adds it back"
        )


def newest_versions(newest: Newest, combos: list[Combination]) -> dict[str, list[str]]:
    """Per framework, its newest `newest.releases` versions among the accepted combinations, newest first."""
    seen: dict[str, set[str]] = defaultdict(set)
    for combo in combos:
        for name, version in combo.frameworks:
            seen[name].add(version)
    return {name: sorted(versions, key=Version, reverse=True)[: newest.releases] for name, versions in seen.items()}
