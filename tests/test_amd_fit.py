"""amd_fit.from_json: an AmdFit reads back as written, and a fit of the wrong shape is one line naming its key."""

from __future__ import annotations

from typing import Any

import pytest

from builder.model import amd_fit
from builder.model.amd_fit import AmdFit, AmdFramework, AmdLibrary

FIT = AmdFit(
    reader="offload",
    rocm="7.0",
    libraries=(AmdLibrary("torch/lib/libtorch_hip.so", (("gfx90a", 2), ("gfx942", 1))),),
    frameworks=(AmdFramework("torch", ("torch/lib/libtorch_hip.so",), jit=False),),
)


def fail(what: str) -> ValueError:
    return ValueError(what)


def test_an_amd_fit_reads_back_as_written() -> None:
    assert amd_fit.from_json(FIT.to_json(), "amd", fail) == FIT
    assert amd_fit.from_json({k: v for k, v in FIT.to_json().items() if k != "rocm"}, "amd", fail).rocm is None


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ({"colour": "blue"}, "amd: unknown keys colour"),
        ({"reader": 1}, "amd: 'reader' must be text"),
        ({"rocm": 7}, "amd: 'rocm' must be text"),
        ({"libraries": {}}, "amd: 'libraries' must be a list of at most"),
        ({"libraries": [{"path": "a.so", "targets": {"sm_90": 1}}]}, "amd: 'libraries.targets' must map target IDs"),
        ({"libraries": [{"path": 5, "targets": {}}], "frameworks": []}, "amd: 'libraries.path' must be text"),
        (
            {"frameworks": [{"name": "torch", "libraries": ["b.so"], "jit": False}]},
            "amd: 'frameworks.libraries' names a library that is not in 'libraries'",
        ),
        ({"frameworks": [{"name": "torch", "libraries": []}]}, "amd: 'frameworks.jit' must be true or false"),
        ({"frameworks": "torch"}, "amd: 'frameworks' must be a list of objects"),
    ],
)
def test_an_amd_fit_of_the_wrong_shape_is_one_line(edit: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match="^" + says) as caught:
        amd_fit.from_json({**FIT.to_json(), **edit}, "amd", fail)
    assert "\n" not in str(caught.value)
