"""The tags a published image gets: its immutable full tag (repository:<id>) and floating tags
that point at the newest known-good image of their line:

    torch2.14.1-cu130-py3.11-debian12        ->  torch2.14-cu130-py3.11-debian12, torch2.14-cu130
    torch2.14.1-cu130-py3.11-debian12-arm64  ->  torch2.14-cu130-py3.11-debian12-arm64, torch2.14-cu130-arm64

A floating tag moves only to the newest version of its line, so publishing an older release
after a newer one never moves it back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from packaging.version import Version

from builder.catalog.records import KnownGood
from builder.model.plan import platform_of_id, platform_suffix

ID = re.compile(
    r"^(?P<name>[a-z][a-z_-]*?)(?P<version>\d+\.\d+)(?:\.[0-9a-z.]+)?-(?P<accel>[a-z]+[0-9.]*)(?P<rest>(?:-on-[a-z0-9.]+)?-py\d+\.\d+-.+)$"
)


def floating_tags(image_id: str) -> tuple[str, ...]:
    """The line names of an image id (none for ids of more than one framework or odd shapes). An
    image for another platform than linux/amd64 keeps its suffix on both (torch2.14-cu130-arm64):
    a line's short tag never moves to another platform's image."""
    suffix = platform_suffix(platform_of_id(image_id))
    found = ID.match(image_id.removesuffix(suffix))
    if not found or "+" in image_id:
        return ()
    line = f"{found['name']}{found['version']}-{found['accel']}"
    return (f"{line}{found['rest']}{suffix}", f"{line}{suffix}")


def newest_of_line(line: str, records: Sequence[KnownGood]) -> KnownGood | None:
    """The record a floating tag should point at: the highest framework version of the line."""
    members = [r for r in records if line in floating_tags(r.id)]

    def key(record: KnownGood) -> tuple[Version, str]:
        try:
            version = Version(record.frameworks.get(record.stack, "0"))
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            version = Version("0")
        return version, record.published

    return max(members, key=key) if members else None
