"""Bad matrix files: one line `error: <file>:<line>: <what and how to fix>` on stderr, exit 2, nothing written.

Each case starts from a valid one-image matrix, breaks one thing, and names the line that must be
reported: the line of the offending key or value, found by a marker text in the broken file.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import Result

from builder.spec.matrix import load_matrix
from builder.util.errors import UserError
from tests.conftest import SMALL_MATRIX

SMALL = SMALL_MATRIX
IMAGE_LINE = "    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04\n"
RunCli = Callable[..., Result]  # the `cli` fixture: run(*args) -> click Result
ERROR = re.compile(r"^error: (?P<file>[^:\n]+):(?P<line>[0-9]+): (?P<what>.+)$")


@dataclass(frozen=True)
class Case:
    """A broken matrix, the text on the line the error must name, and words the message must contain."""

    text: str
    marker: str
    words: tuple[str, ...]
    occurrence: int = 1
    at: int | None = None  # the line, where no marker can name it (an empty file)

    def line(self) -> int:
        if self.at is not None:
            return self.at
        seen = 0
        for number, line in enumerate(self.text.splitlines(), start=1):
            if self.marker in line:
                seen += 1
                if seen == self.occurrence:
                    return number
        raise AssertionError(f"marker {self.marker!r} not in the case")


def edit(old: str, new: str) -> str:
    assert SMALL.count(old) == 1, old
    return SMALL.replace(old, new)


def image(ref: str) -> str:
    return edit(IMAGE_LINE, f"    image: {ref}\n")


CASES: dict[str, Case] = {
    "unknown top key": Case(edit("stacks:", "stackz:"), "stackz:", ("unknown key 'stackz'", "did you mean 'stacks'?")),
    "unknown base key": Case(
        edit("    os: ubuntu22.04\n", "    os: ubuntu22.04\n    imagee: nvidia/cuda:12.4.1\n"),
        "imagee:",
        ("unknown key 'imagee' in base 'cuda12.4-ubuntu22.04'", "did you mean 'image'?"),
    ),
    "bad vendor": Case(edit("vendor: cuda", "vendor: cudaa"), "vendor:", ("unknown vendor 'cudaa'", "did you mean 'cuda'?")),
    "missing base image": Case(edit(IMAGE_LINE, ""), "cuda12.4-ubuntu22.04:", ("needs 'image:'", "bootstrap: debootstrap")),
    "cpu base with a version": Case(
        edit("python:", '  cpu-ubuntu24.04:\n    vendor: cpu\n    os: ubuntu24.04\n    version: "1.0"\n    image: ubuntu:24.04\npython:'),
        'version: "1.0"',
        ("is a cpu base; remove 'version:'",),
    ),
    "yaml syntax error": Case(
        edit("    os: ubuntu22.04\n", "    os: ubuntu22.04: jammy\n"), "os: ubuntu22.04: jammy", ("YAML syntax error", "mapping values")
    ),
    "yaml tab indentation": Case(edit("    os: ubuntu22.04\n", "\tos: ubuntu22.04\n"), "\tos:", ("YAML syntax error",)),
    "duplicate top key": Case(SMALL + 'python: ["3.12"]\n', "python:", ("duplicate key 'python'", "first written on line 8"), occurrence=2),
    "duplicate base key": Case(
        edit("    os: ubuntu22.04\n", "    os: ubuntu22.04\n    os: ubuntu24.04\n"),
        "os: ubuntu24.04",
        ("duplicate key 'os'", "first written on line 6"),
    ),
    "python 3.10 unquoted": Case(edit('python: ["3.11"]', "python: [3.10]"), "python:", ("read as a number", "quote it", '"3.10"')),
    "python 3.11 unquoted": Case(edit('python: ["3.11"]', "python: [3.11]"), "python:", ("read as a number", "quote it", '"3.11"')),
    "python on its own line": Case(
        edit('python: ["3.11"]', 'python:\n  - "3.11"\n  - "three"'), '"three"', ("python version 'three' is not valid",)
    ),
    "framework version float": Case(edit('torch: ["2.5.1"]', "torch: [2.5]"), "torch: [2.5]", ("read as a number", "quote it")),
    "bad version string": Case(
        edit('torch: ["2.5.1"]', 'torch: ["2.5.1;rm -rf /"]'), "torch: [", ("torch version", "is not valid", '"2.5.1"')
    ),
    "version with local part": Case(
        edit('torch: ["2.5.1"]', 'torch: ["2.5.1+cu124"]'), "torch: [", ("torch version '2.5.1+cu124' is not valid",)
    ),
    "unknown framework key": Case(
        edit('  torch: ["2.5.1"]', '  torch: ["2.5.1"]\n  tourch: ["2.5.1"]'),
        "tourch:",
        ("unknown key 'tourch' in frameworks", "did you mean 'torch'?"),
    ),
    "unknown framework in stack": Case(
        edit("  torch: [torch]", "  torch: [tourch]"), "[tourch]", ("unknown framework 'tourch'", "did you mean 'torch'?")
    ),
    "stack uses framework without versions": Case(
        edit("  torch: [torch]", "  torch: [torch]\n  jax: [jax]"),
        "jax: [jax]",
        ("stack 'jax' uses jax but frameworks.jax lists no versions",),
    ),
    "exclude unknown base": Case(
        SMALL + "exclude:\n  - stack: torch\n    base: cuda12.4-ubuntu2204\n",
        "base: cuda12.4-ubuntu2204",
        ("exclude names unknown base 'cuda12.4-ubuntu2204'", "did you mean 'cuda12.4-ubuntu22.04'?"),
    ),
    "exclude unknown stack": Case(
        SMALL + "exclude:\n  - {stack: torhc}\n", "torhc", ("exclude names unknown stack 'torhc'", "did you mean 'torch'?")
    ),
    "exclude unknown framework": Case(
        SMALL + 'exclude:\n  - {tourch: "2.5.1"}\n', "tourch", ("unknown key 'tourch' in an exclude entry", "did you mean 'torch'?")
    ),
    "exclude unknown vendor": Case(SMALL + "exclude:\n  - {vendor: nvidia}\n", "{vendor: nvidia}", ("unknown vendor 'nvidia'",)),
    "include unknown base": Case(
        SMALL + 'include:\n  - {base: cuda12.4-ubuntu2204, stack: torch, torch: "2.5.1", python: "3.11"}\n',
        "cuda12.4-ubuntu2204",
        ("include names unknown base 'cuda12.4-ubuntu2204'", "did you mean 'cuda12.4-ubuntu22.04'?"),
    ),
    "include unknown stack": Case(
        SMALL + 'include:\n  - {base: cuda12.4-ubuntu22.04, stack: trch, torch: "2.5.1", python: "3.11"}\n',
        "trch",
        ("include names unknown stack 'trch'", "did you mean 'torch'?"),
    ),
    "include unknown framework": Case(
        SMALL + 'include:\n  - {base: cuda12.4-ubuntu22.04, stack: torch, tourch: "2.5.1", python: "3.11"}\n',
        "tourch",
        ("unknown key 'tourch' in an include entry", "did you mean 'torch'?"),
    ),
    "include cannot work": Case(
        SMALL + 'include:\n  - {base: cuda12.4-ubuntu22.04, stack: torch, torch: "2.13.0", python: "3.11"}\n',
        "2.13.0",
        ("this include cannot work", "torch 2.13.0 has no CUDA 12 wheel at or below 12.4.1", "change or remove it"),
    ),
    "include without python": Case(
        SMALL + 'include:\n  - {base: cuda12.4-ubuntu22.04, stack: torch, torch: "2.5.1"}\n', "- {base", ("needs an exact 'python:'",)
    ),
    "include bad python value": Case(
        SMALL + 'include:\n  - base: cuda12.4-ubuntu22.04\n    stack: torch\n    torch: "2.5.1"\n    python: "3.x"\n',
        'python: "3.x"',
        ("include python '3.x' is not valid",),
    ),
    "include bad framework version": Case(
        SMALL + 'include:\n  - base: cuda12.4-ubuntu22.04\n    stack: torch\n    python: "3.11"\n    torch: "latest"\n',
        'torch: "latest"',
        ("include torch version 'latest' is not valid",),
    ),
    "image with ;": Case(image('"nvidia/cuda:12.4.1;rm"'), "image:", ("image 'nvidia/cuda:12.4.1;rm' is not valid",)),
    "image with $(": Case(image('"nvidia/cuda:$(id)"'), "image:", ("image 'nvidia/cuda:$(id)' is not valid",)),
    "image with backtick": Case(image('"nvidia/cuda:`id`"'), "image:", ("is not valid",)),
    "image with newline": Case(image('"nvidia/cuda:12.4.1\\nRUN id"'), "image:", ("is not valid",)),
    "image with trailing newline": Case(image('"nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04\\n"'), "image:", ("is not valid",)),
    "image block scalar": Case(image("|\n      nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"), "image:", ("is not valid",)),
    "image with space": Case(image('"nvidia/cuda 12.4.1"'), "image:", ("is not valid",)),
    "image with quote": Case(image('"nvidia/cuda:12.4\'1"'), "image:", ("is not valid",)),
    "bad digest": Case(
        edit(IMAGE_LINE, IMAGE_LINE + "    digest: sha256:abc\n"), "digest:", ("digest 'sha256:abc' is not valid", "64 hex digits")
    ),
    "digest with trailing newline": Case(
        edit(IMAGE_LINE, IMAGE_LINE + f'    digest: "sha256:{"a" * 64}\\n"\n'), "digest:", ("is not valid",)
    ),
    "version with trailing newline": Case(edit('torch: ["2.5.1"]', 'torch: ["2.5.1\\n"]'), "torch: [", ("is not valid",)),
    "bad default select": Case(
        edit("bases:", 'defaults:\n  select: "bse=local"\nbases:'),
        "select:",
        ("defaults.select: unknown select key 'bse'", "did you mean 'base'?"),
    ),
    "bad default select in a list": Case(
        edit("bases:", 'defaults:\n  select:\n    - "stack=torch"\n    - "stak=jax"\nbases:'),
        '- "stak=jax"',
        ("defaults.select: unknown select key 'stak'", "did you mean 'stack'?"),
    ),
    "default select list item not text": Case(
        edit("bases:", 'defaults:\n  select:\n    - "stack=torch"\n    - {stack: jax}\nbases:'),
        "- {stack: jax}",
        ("defaults.select must be a quoted string",),
    ),
    "empty default select list": Case(
        edit("bases:", "defaults:\n  select: []\nbases:"), "select: []", ("defaults.select is an empty list",)
    ),
    "empty expression in a default select list": Case(
        edit("bases:", 'defaults:\n  select:\n    - "stack=torch"\n    - ""\nbases:'), '- ""', ("an empty expression in its list",)
    ),
    "default select listed twice": Case(
        edit("bases:", 'defaults:\n  select:\n    - "stack=torch"\n    - "stack=torch"\nbases:'),
        '- "stack=torch"',
        ("twice",),
        occurrence=2,
    ),
    "bad index url": Case(
        SMALL + 'indexes:\n  torch-cu124: "https://mirror.example.com/$(id)"\n', "torch-cu124:", ("indexes.torch-cu124", "is not valid")
    ),
    "bad registry": Case(
        edit("registry: ghcr.io/example/gpu-images", "registry: ghcr.io/Example/GPU images"), "registry:", ("registry", "is not valid")
    ),
    "missing required key": Case(edit("stacks:\n  torch: [torch]\n", ""), "registry:", ("missing required key 'stacks'",)),
    "empty file": Case("", "", ("the file is empty",), at=1),
    "comment-only file": Case("# nothing here yet\n", "#", ("the file is empty",)),
    "top level is a list": Case("- a\n- b\n", "- a", ("the top level must be a mapping",)),
    "one release in two spellings": Case(
        edit('torch: ["2.5.1"]', 'torch:\n    - "2.5.1"\n    - "2.5.1.0"'),
        '"2.5.1.0"',
        ("frameworks.torch lists '2.5.1.0' and '2.5.1' (line 11), one release by PEP 440", "keep '2.5.1'"),
    ),
    "a zero-padded spelling first": Case(
        edit('torch: ["2.5.1"]', 'torch: ["2.5.01", "2.5.1"]'), "torch: [", ("lists '2.5.1' and '2.5.01'", "keep '2.5.1'")
    ),
    "an include spelling a listed release another way": Case(
        SMALL + 'include:\n  - {base: cuda12.4-ubuntu22.04, stack: torch, python: "3.11", torch: "2.5.1.0"}\n',
        "- {base:",
        ("include torch '2.5.1.0' is frameworks.torch's '2.5.1' spelled another way", "write '2.5.1'"),
    ),
    "yaml integer tag on a non-number": Case(edit("registry: ghcr.io/example/gpu-images", "registry: !!int ghcr"), "registry:", ()),
    "yaml timestamp tag on a non-date": Case(edit('torch: ["2.5.1"]', 'torch: [!!timestamp "2.5.1"]'), "torch:", ()),
    # issue 37: packaging's Version let int() refuse a 4,400-digit release number with a bare ValueError
    "a version of 4400 digits": Case(
        edit('torch: ["2.5.1"]', f'torch: ["2.{"1" * 4400}"]'), "torch: [", ("torch version '2.111", "…' is not valid", '"2.5.1"')
    ),
    "an include version of 4400 digits": Case(
        SMALL + f'include:\n  - {{base: cuda12.4-ubuntu22.04, stack: torch, python: "3.11", torch: "2.{"1" * 4400}"}}\n',
        "- {base:",
        ("include torch version", "is not valid"),
    ),
    "a newest entry without releases": Case(
        SMALL + "newest:\n  - {base: cuda12.4-ubuntu22.04}\n", "- {base:", ("a newest entry needs 'releases: N'",)
    ),
    "a newest count of zero": Case(
        SMALL + "newest:\n  - {base: cuda12.4-ubuntu22.04,\n     releases: 0}\n", "releases: 0", ("whole number of at least 1", "not 0")
    ),
    "a newest count as text": Case(
        SMALL + 'newest:\n  - {base: cuda12.4-ubuntu22.04,\n     releases: "1"}\n', "releases:", ("whole number of at least 1", "not '1'")
    ),
    "a newest entry naming an unknown base": Case(
        SMALL + "newest:\n  - {releases: 1,\n     base: cuda12.4-ubuntu2204}\n", "base: cuda", ("newest names unknown base", "did you mean")
    ),
    "a newest entry with an unknown key": Case(
        SMALL + "newest:\n  - {releases: 1,\n     bsae: cuda12.4-ubuntu22.04}\n", "bsae:", ("unknown key 'bsae'", "did you mean 'base'?")
    ),
    "recursive yaml alias": Case(edit('python: ["3.11"]', 'python: &py ["3.11", *py]'), "python:", ()),
}


def check_error(result: Result, case: Case, file: str = "matrix.yaml") -> None:
    """Exit 2, one line on stderr in the documented shape, pointing at the case's line, no traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), f"crashed: {result.exception!r}"
    assert result.exit_code == 2, f"exit code {result.exit_code}, output: {result.output!r}"
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    match = ERROR.match(lines[0])
    assert match, f"not `error: <file>:<line>: ...`: {lines[0]!r}"
    assert match["file"] == file
    assert int(match["line"]) == case.line(), lines[0]
    for word in case.words:
        assert word in match["what"], f"{word!r} not in {lines[0]!r}"


@pytest.mark.parametrize("name", CASES)
def test_bad_matrix_is_one_line_error_and_writes_nothing(name: str, in_tmp: Path, cli: RunCli) -> None:
    case = CASES[name]
    (in_tmp / "matrix.yaml").write_text(case.text, encoding="utf-8")
    check_error(cli("--matrix", "matrix.yaml", "plan"), case)
    check_error(cli("--matrix", "matrix.yaml", "render", "--out", "out/images"), case)
    assert not (in_tmp / "out").exists()
    assert sorted(p.name for p in in_tmp.iterdir()) == ["matrix.yaml"]


def test_the_default_matrix_file_is_found_in_the_working_folder(in_tmp: Path, cli: RunCli) -> None:
    case = CASES["bad vendor"]
    (in_tmp / "matrix.yaml").write_text(case.text, encoding="utf-8")
    check_error(cli("render"), case)
    assert not (in_tmp / "images").exists()


def test_missing_file_names_it_and_the_fix(in_tmp: Path, cli: RunCli) -> None:
    result = cli("--matrix", "nope.yaml", "render", "--out", "out")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        "error: nope.yaml: no such file; pass --matrix PATH or set BUILDER_MATRIX, or run from a folder with matrix.yaml"
    ]
    assert not (in_tmp / "out").exists()


def test_error_names_the_file_as_given_outside_the_working_folder(tmp_path: Path, cli: RunCli) -> None:
    case = CASES["bad digest"]
    path = tmp_path / "elsewhere" / "matrix.yaml"
    path.parent.mkdir()
    path.write_text(case.text, encoding="utf-8")
    check_error(cli("--matrix", str(path), "plan"), case, file=str(path))


def test_the_real_executable_prints_one_line_and_exits_2(tmp_path: Path, root: Path) -> None:
    case = CASES["unknown top key"]
    (tmp_path / "matrix.yaml").write_text(case.text, encoding="utf-8")
    proc = subprocess.run(
        [str(root / ".venv" / "bin" / "builder"), "--matrix", "matrix.yaml", "render", "--out", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"error: matrix.yaml:{case.line()}: unknown key 'stackz' in the top level; did you mean 'stacks'?\n"
    assert not (tmp_path / "out").exists()


def test_unclosed_bracket_points_at_the_bracket(in_tmp: Path, cli: RunCli) -> None:
    """PyYAML notices the missing `]` on the next line; the message must still lead to the line that opened it."""
    text = edit('python: ["3.11"]', 'python: ["3.11"')
    (in_tmp / "matrix.yaml").write_text(text, encoding="utf-8")
    result = cli("--matrix", "matrix.yaml", "plan")
    assert result.exit_code == 2
    match = ERROR.match(result.stderr.strip())
    assert match, result.stderr
    opened = Case(text, 'python: ["3.11"', ()).line()
    assert int(match["line"]) == opened or f"line {opened}" in match["what"], result.stderr


# ---------------------------------------------------------------- what a valid matrix becomes


def test_small_matrix_loads_into_records(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(SMALL, encoding="utf-8")
    matrix = load_matrix(path)
    (b,) = matrix.bases
    assert (b.name, b.vendor, b.version, b.os, b.image, b.digest, b.line) == (
        "cuda12.4-ubuntu22.04",
        "cuda",
        "12.4.1",
        "ubuntu22.04",
        "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
        None,
        3,
    )
    assert matrix.python == ("3.11",)
    assert matrix.frameworks == (("torch", ("2.5.1",)),)
    assert matrix.stacks == (("torch", ("torch",)),)
    assert (matrix.registry, matrix.default_select, matrix.exclude, matrix.include) == ("ghcr.io/example/gpu-images", (), (), ())


def test_embedded_matrix_loads(root: Path) -> None:
    matrix = load_matrix(root / "matrix.yaml")
    assert [text for text, _ in matrix.default_select] == [
        "base=local-debian13,platform=linux/amd64,stack=tensorflow",
        "base=local-debian13,platform=linux/amd64,stack=jax",
        "base=local-debian13,platform=linux/amd64,stack=numba",
        "base=local-debian12,platform=linux/amd64,stack=torch",
    ]
    lines = (root / "matrix.yaml").read_text().splitlines()
    assert all(text in lines[line - 1] for text, line in matrix.default_select), "each expression keeps its own line"
    assert {b.name for b in matrix.bases} >= {"cuda12.4-ubuntu22.04", "rocm7.0-ubuntu24.04", "rocm5.7-debian13", "local-debian12"}
    local = matrix.base("local-debian12")
    assert (local.vendor, local.bootstrap, local.image) == ("cpu", "debootstrap", None)


def test_user_error_text_shape() -> None:
    assert str(UserError("bad", "m.yaml", 3)) == "m.yaml:3: bad"
    assert str(UserError("bad", "m.yaml")) == "m.yaml: bad"
    assert str(UserError("bad")) == "bad"


def test_a_bootstrapped_rocm_base_needs_debian13_and_its_packages(tmp_path: Path) -> None:
    def load(base: str) -> str:
        path = tmp_path / "m.yaml"
        path.write_text(
            "registry: r\nbases:\n  b:\n" + base + "python: ['3.13']\nframeworks: {cupy: ['14.2.0']}\nstacks: {cupy: [cupy]}\n",
            encoding="utf-8",
        )
        with pytest.raises(UserError) as caught:
            load_matrix(path)
        return str(caught.value)

    assert "os: debian13" in load(
        "    vendor: rocm\n    version: '5.7'\n    os: debian12\n    bootstrap: debootstrap\n    packages: [x1]\n"
    )
    assert "packages:" in load("    vendor: rocm\n    version: '5.7'\n    os: debian13\n    bootstrap: debootstrap\n")
    assert "package" in load("    vendor: rocm\n    version: '5.7'\n    os: debian13\n    bootstrap: debootstrap\n    packages: ['x;rm']\n")
    assert "image base" in load("    vendor: rocm\n    version: '7.0'\n    os: ubuntu24.04\n    image: rocm/dev:7\n    packages: [x1]\n")
