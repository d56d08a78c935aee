"""The tags a published image gets: its immutable full tag (repository:<id>) and floating tags
that point at the newest known-good image of their line:

    torch2.14.1-cu130-py3.11-debian12        ->  torch2.14-cu130-py3.11-debian12, torch2.14-cu130
    torch2.14.1-cu130-py3.11-debian12-arm64  ->  torch2.14-cu130-py3.11-debian12-arm64, torch2.14-cu130-arm64

They are composed from the image's tag line (builder/model/plan.py TagLine: planned with the spec,
recorded with the record), never parsed out of its id. A floating tag moves only to the newest
version of its line, so publishing an older release after a newer one never moves it back.
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from builder.catalog.records import KnownGood
from builder.model.plan import TagLine, platform_suffix


def floating_tags(line: TagLine | None) -> tuple[str, ...]:
    """The floating tags of an image of `line` (none for an image of no line: several frameworks). An
    image for another platform than linux/amd64 keeps its suffix on both (torch2.14-cu130-arm64):
    a line's short tag never moves to another platform's image. The short tag names the wheels'
    variant only (torch2.13-cu126 for torch2.13-cu126-on-cu128-py3.11-ubuntu24.04)."""
    if line is None:
        return ()
    suffix = platform_suffix(line.platform)
    short = f"{line.name}{line.line}-{line.wheel or line.accelerator}"
    full = f"{line.name}{line.line}-{line.accelerator_tag}-py{line.python}-{line.os}"
    return (f"{full}{suffix}", f"{short}{suffix}")


def newest_of_line(line: str, records: Sequence[KnownGood]) -> KnownGood | None:
    """The record a floating tag should point at: the highest framework version of the line."""
    members = [r for r in records if line in floating_tags(r.line)]

    def key(record: KnownGood) -> tuple[Version, str]:
        try:
            version = Version(record.frameworks.get(record.stack, "0"))
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            version = Version("0")
        return version, record.published

    return max(members, key=key) if members else None
