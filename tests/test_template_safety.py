"""A template is input: a bad one (undefined name, bad syntax, not UTF-8, a loop without end, a huge
value, a link out of templates/) stops render with one line naming its file (and line), exit 2,
and nothing written; a malformed images/.rendered.json is no traceback either."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from click.testing import Result

from builder.render.tree import MANIFEST

MATRIX = textwrap.dedent(
    """\
    registry: ghcr.io/example/gpu-images
    bases:
      local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap}
    python: ["3.11"]
    frameworks:
      numba: ["0.68.0"]
    stacks:
      numba: [numba]
    """
)
SHIPPED = Path(__file__).resolve().parents[1] / "templates"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "templates").mkdir()
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    return tmp_path


def render(cli: object, repo: Path, *extra: str) -> Result:
    return cli("--matrix", str(repo / "matrix.yaml"), "render", *extra)  # type: ignore[operator, no-any-return]


def one_line(result: Result, *words: str) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


HOSTILE = {
    "undefined": ("FROM {{ base_ref }}\nRUN {{ nope }}\n", ["Dockerfile.j2:2:", "'nope' is undefined"]),
    "syntax": ("FROM x\n{% for %}\n", ["Dockerfile.j2:2:", "template syntax"]),
    "range": ("{% for i in range(10**9) %}x{% endfor %}\n", ["Dockerfile.j2:1:", "Range too big"]),
    "repeat": ("{{ 'x' * 10**9 }}\n", ["Dockerfile.j2:1:", "too big"]),
    "power": ("{{ 10 ** (10 ** 10) }}\n", ["Dockerfile.j2:1:", "too big"]),
    "doubling": ('{% set ns = namespace(s="x") %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}\n', ["too big"]),
    "concat doubling": (
        '{% set ns = namespace(s="x") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}\n',
        ["'~'", "too big"],
    ),
    "output": ("{{ 'x' | center(50000000) }}\n", ["larger than 4 MiB"]),
    "private": ("{{ spec.__class__.__init__.__globals__ }}\n", ["Dockerfile.j2:1:", "unsafe"]),
    "missing include": ('{% include "nowhere.j2" %}\n', ["Dockerfile.j2:1:", "nowhere.j2"]),
    "self include": ('{% include "Dockerfile.j2" %}\n', ["without end"]),
    "division": ("{{ 1 / 0 }}\n", ["Dockerfile.j2:1:", "ZeroDivisionError"]),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_bad_template_is_one_line_naming_it_and_nothing_is_written(cli: object, repo: Path, name: str) -> None:
    text, words = HOSTILE[name]
    (repo / "templates" / "Dockerfile.j2").write_text(text, encoding="utf-8")
    line = one_line(render(cli, repo), *words)
    assert str(repo / "templates") in line
    assert sorted(p.name for p in repo.iterdir()) == ["matrix.yaml", "templates"]


def test_a_template_that_is_not_utf8_is_one_line(cli: object, repo: Path) -> None:
    (repo / "templates" / "Dockerfile.j2").write_bytes(b"FROM \xff\xfe\n")
    one_line(render(cli, repo), "Dockerfile.j2", "not UTF-8")


def test_a_template_that_is_a_fifo_or_a_folder_is_one_line(cli: object, repo: Path) -> None:
    os.mkfifo(repo / "templates" / "Dockerfile.j2")
    one_line(render(cli, repo), "Dockerfile.j2", "not a regular file")
    (repo / "templates" / "Dockerfile.j2").unlink()
    (repo / "templates" / "Dockerfile.j2").mkdir()
    one_line(render(cli, repo), "Dockerfile.j2", "folder")


@pytest.mark.parametrize("where", ["Dockerfile.j2", "partials/header.j2"])
def test_a_template_linked_out_of_templates_is_refused_by_name(cli: object, repo: Path, tmp_path: Path, where: str) -> None:
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_text("SECRET-KEY-MATERIAL\n", encoding="utf-8")
    link = repo / "templates" / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(secret)
    line = one_line(render(cli, repo), str(link), "leads out of", str(secret))
    assert "SECRET" not in line
    assert not (repo / "images").exists()


def test_a_templates_folder_under_a_link_out_is_refused(cli: object, repo: Path, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    (outside / "partials").mkdir(parents=True)
    (outside / "partials" / "header.j2").write_text("SECRET-KEY-MATERIAL\n", encoding="utf-8")
    (repo / "templates" / "partials").symlink_to(outside / "partials")
    one_line(render(cli, repo), "partials/header.j2", "leads out of")
    (repo / "templates" / "partials").unlink()
    (repo / "templates").rmdir()
    (repo / "templates").symlink_to(outside)
    one_line(render(cli, repo), f"{repo / 'templates'}:", "leads out of")


def test_links_inside_templates_still_work(cli: object, repo: Path) -> None:
    (repo / "templates" / "partials").mkdir()
    (repo / "templates" / "partials" / "mine.j2").write_text(
        (SHIPPED / "partials" / "header.j2").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (repo / "templates" / "partials" / "header.j2").symlink_to("mine.j2")
    result = render(cli, repo)
    assert result.exit_code == 0, result.output


def test_a_manifest_nested_200k_deep_is_no_traceback(cli: object, repo: Path) -> None:
    assert render(cli, repo).exit_code == 0
    (repo / "images" / MANIFEST).write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    check = render(cli, repo, "--check")
    assert check.exit_code == 1 and isinstance(check.exception, SystemExit), (check.output, check.exception)  # stale, listed
    result = render(cli, repo)  # not a manifest render wrote: the files' generated headers prove them
    assert result.exit_code == 0, (result.output, result.exception)
    assert render(cli, repo, "--check").exit_code == 0


def test_an_image_json_nested_deep_is_no_traceback(cli: object, repo: Path) -> None:
    assert render(cli, repo).exit_code == 0
    (repo / "images" / MANIFEST).unlink()
    image = next(p for p in (repo / "images").iterdir() if p.is_dir())
    (image / "image.json").write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    one_line(render(cli, repo), "image.json", "was not written by `builder render`")


def test_a_template_with_a_nul_byte_is_one_line_naming_its_line(cli: object, repo: Path) -> None:
    """A NUL reached the rendered Dockerfile (second hostile pass): a template is text."""
    (repo / "templates" / "Dockerfile.j2").write_text("FROM {{ base_ref }}\nRUN true\0echo\n", encoding="utf-8")
    one_line(render(cli, repo), "Dockerfile.j2:2:", "NUL byte")
    assert sorted(p.name for p in repo.iterdir()) == ["matrix.yaml", "templates"]
