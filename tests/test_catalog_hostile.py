"""Hostile catalogs through the real CLI (issue 14, findings 7, 8, 10, 12): wrong types, absurd
sizes, deep JSON, devices and FIFOs are one line and exit 2, fast; a query cannot take minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.catalog.query import parse_query
from builder.catalog.records import MAX_TEXT, RecordError, from_json
from builder.catalog.store import Catalog
from builder.nightly import history
from builder.util.errors import UserError
from builder.util.query import MAX_TERMS
from tests.catalog_fixtures import record

RunCli = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[1]
ID = "torch2.13.0-cpu-py3.11-debian12"


def write_catalog(folder: Path, *records: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "known-good.json").write_text(json.dumps({"schema": 1, "images": list(records)}), encoding="utf-8")
    return folder


def good(**changes: Any) -> dict[str, Any]:
    return {**record(ID).to_json(), **changes}


def one_line_exit_2(result: Result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[:2000]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- wrong types (finding 8, 10) ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("floating", "abc"),  # was taken as ["a", "b", "c"]
        ("floating", [1, 2]),
        ("notes", {"a": 1}),
        ("id", 7),
        ("python", ["3.11"]),
        ("frameworks", {"torch": 2.13}),
        ("frameworks", ["torch"]),
        ("accelerator", {"kind": {"deep": 1}}),
        ("accelerator", {"kind": "tpu", "version": None}),  # typed: one of records.VENDORS
        ("accelerator", {"kind": "cuda", "version": "13.0", "driver": "580"}),
        ("host", "no GPU"),
        ("host", {"gpu": None, "driver": None, "engine": None}),
        ("host", {"gpu": "no GPU", "cpu": "x"}),
        ("base", None),
        ("base", {"name": "b", "ref": "r"}),
        ("base", {"name": "b", "ref": "r", "id": "i", "digest": None, "tag": "t"}),
        ("tests", {"tests": "9"}),
        ("tests", {"tests": True}),
        ("gpu_skipped_accepted", "no"),
        ("size_mb", "917"),
        ("size_mb", -1),
        ("lock_sha256", 5),
        ("digest", None),
        ("verdict", ["passed"]),
        ("published", 20261201),
    ],
)
def test_a_field_of_the_wrong_type_is_one_line_naming_record_and_field(cli: RunCli, tmp_path: Path, field: str, value: Any) -> None:
    folder = write_catalog(tmp_path / "cat", good(**{field: value}))
    line = one_line_exit_2(cli("catalog", "--catalog", str(folder)))
    assert field in line and (ID in line or field == "id"), line


@pytest.mark.parametrize(
    "tag",
    ["https://ci:s3cret@127.0.0.1:5000/gpu-images:x", "127.0.0.1:5000/other-images:x", "no-colon", "127.0.0.1:5000/gpu-images:bad tag"],
)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_record_tag_outside_its_digests_repository_is_refused_on_read(cli: RunCli, tmp_path: Path, tag: str, fmt: str) -> None:
    """Found by the second hostile pass: a record whose `tag` was an https URL with a password was
    listed, and `catalog --format json` printed the password; only `pull` checked the tag. A record's
    tag is <the digest's repository>:<tag>, as publish writes it, and the reader now says so."""
    folder = write_catalog(tmp_path / "cat", good(tag=tag))
    line = one_line_exit_2(cli("catalog", "--catalog", str(folder), "--format", fmt), ID, "127.0.0.1:5000/gpu-images:<tag>")
    assert "s3cret" not in line


@pytest.mark.parametrize("field", ["digest", "tag"])
def test_a_refused_reference_never_quotes_its_password(cli: RunCli, tmp_path: Path, field: str) -> None:
    """Found by the second hostile pass: a record digest `u:pw@registry/x@sha256:...` (no scheme, so
    redact did not see it) was quoted whole in the refusal."""
    value = "ci:s3cret@registry.example/gpu-images" + ("@sha256:" + "0" * 64 if field == "digest" else ":x")
    folder = write_catalog(tmp_path / "cat", good(**{field: value}))
    line = one_line_exit_2(cli("catalog", "--catalog", str(folder)), ID, field)
    assert "s3cret" not in line and "****@registry.example" in line


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", "../../etc"),  # evidence, images/<id>/ and base locks were read from outside catalog/
        ("id", "/etc/passwd"),
        ("id", "torch\n"),
        ("manifest", "../../../etc/passwd"),
        ("manifest", "/etc/passwd"),
        ("manifest", "manifests/../../x.txt"),
        ("manifest", "evidence/x.txt"),
    ],
)
def test_a_record_id_or_manifest_that_leaves_the_catalog_is_refused(cli: RunCli, tmp_path: Path, field: str, value: str) -> None:
    """Issue 37: a record's `id` and `manifest` took `../` and absolute paths; `env lock` then read a
    base lock or manifest from outside catalog/ and `catalog --verify` read evidence from there."""
    folder = write_catalog(tmp_path / "cat", good(**{field: value}))
    line = one_line_exit_2(cli("catalog", "--catalog", str(folder)), field)
    assert "restore the file from git" in line
    with pytest.raises(RecordError, match=field):
        from_json(good(**{field: value}), "c")


def test_infinity_and_nan_are_refused(cli: RunCli, tmp_path: Path) -> None:
    folder = tmp_path / "cat"
    folder.mkdir()
    text = json.dumps({"schema": 1, "images": [good(size_mb=1.0)]}).replace("1.0", "Infinity")
    (folder / "known-good.json").write_text(text)
    one_line_exit_2(cli("catalog", "--catalog", str(folder), "--format", "json"), "Infinity")
    with pytest.raises(RecordError, match="size_mb"):
        from_json(good(size_mb=float("nan")), "c")


def test_a_five_thousand_digit_version_is_refused(cli: RunCli, tmp_path: Path) -> None:
    folder = write_catalog(tmp_path / "cat", good(frameworks={"torch": "1" * 5000}), {**good(frameworks={"torch": "2.1"}), "id": "other"})
    one_line_exit_2(cli("catalog", "--catalog", str(folder), "torch=*"), "frameworks")


def test_a_huge_field_is_refused_fast(cli: RunCli, tmp_path: Path) -> None:
    """A 10 MB string took `catalog` 146 s to lay out; now it is refused on read."""
    folder = write_catalog(tmp_path / "cat", good(notes=["x" * 10_000_000]))
    started = time.perf_counter()
    line = one_line_exit_2(cli("catalog", "--catalog", str(folder)), "notes", str(MAX_TEXT))
    assert time.perf_counter() - started < 5
    assert len(line) < 500


def test_deep_json_is_one_line(cli: RunCli, tmp_path: Path) -> None:
    folder = tmp_path / "cat"
    folder.mkdir()
    (folder / "known-good.json").write_text('{"schema": 1, "images": [' + "[" * 200_000 + "]" * 200_000 + "]}")
    one_line_exit_2(cli("catalog", "--catalog", str(folder)), "nested too deeply")


def test_deep_nightly_history_falls_back_to_the_catalog(tmp_path: Path) -> None:
    (tmp_path / "nightly").mkdir()
    (tmp_path / "nightly" / "last.json").write_text('{"schema": 1, "images": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert history.previous(tmp_path / "nightly" / "last.json", [record(ID)]) == {ID: "passed"}
    history.save(tmp_path / "nightly" / "last.json", "d", [])  # replaces the unreadable history with a readable one
    assert json.loads((tmp_path / "nightly" / "last.json").read_text())["images"] == []


# -- files that are not files (finding 7) ----------------------------------------------------------
def _cli_subprocess(*args: str, cwd: Path, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """In a child process with a timeout: the old code hung (FIFO) or read until memory ran out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BUILDER_MATRIX", None)
    return subprocess.run([sys.executable, "-m", "builder", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_a_catalog_that_is_a_fifo_or_a_device_link_is_one_line(tmp_path: Path) -> None:
    fifo_cat = tmp_path / "fifo"
    fifo_cat.mkdir()
    os.mkfifo(fifo_cat / "known-good.json")
    zero_cat = tmp_path / "zero"
    zero_cat.mkdir()
    (zero_cat / "known-good.json").symlink_to("/dev/zero")
    for folder in (fifo_cat, zero_cat):
        done = _cli_subprocess("catalog", "--catalog", str(folder), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and "not a regular file" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_matrix_that_is_a_fifo_or_a_device_is_one_line(tmp_path: Path, kind: str) -> None:
    matrix = tmp_path / "matrix.yaml"
    if kind == "fifo":
        os.mkfifo(matrix)
    else:
        matrix.symlink_to("/dev/zero")
    done = _cli_subprocess("--matrix", str(matrix), "plan", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.strip().count("\n") == 0 and "not a regular file" in done.stderr


# -- missing folders (finding 10) ------------------------------------------------------------------
@pytest.mark.parametrize("command", [("catalog",), ("report",), ("pull", "torch=2.13")])
def test_a_named_catalog_folder_that_is_missing_is_exit_2(
    cli: RunCli, write_matrix: Callable[..., Path], tmp_path: Path, command: tuple[str, ...]
) -> None:
    matrix = write_matrix()
    one_line_exit_2(
        cli("--matrix", str(matrix), command[0], "--catalog", str(tmp_path / "typo"), *command[1:]), "no such catalog folder", "--catalog"
    )


def test_the_default_catalog_may_be_absent(cli: RunCli, write_matrix: Callable[..., Path]) -> None:
    matrix = write_matrix()
    result = cli("--matrix", str(matrix), "catalog", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"images": [], "runs_on": {}, "end_of_life": {}, "support_window": {}, "indexes": {}, "shares": {}}


def test_the_catalog_is_written_without_nan(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    with pytest.raises(ValueError):
        catalog.add([record(ID, size_mb=float("inf"))], {})
    assert not catalog.file.exists()


# -- slow paths (finding 12) -----------------------------------------------------------------------
def test_queries_are_capped_and_the_error_line_is_short(cli: RunCli, tmp_path: Path) -> None:
    records = [{**good(), "id": f"img{n:04d}", "frameworks": {"torch": f"2.{n}.0"}} for n in range(2001)]
    folder = write_catalog(tmp_path / "cat", *records)
    terms = [f"torch=2.{n}" for n in range(3000)]
    started = time.perf_counter()
    line = one_line_exit_2(cli("catalog", "--catalog", str(folder), *terms), f"more than {MAX_TERMS} terms")
    assert time.perf_counter() - started < 5 and len(line) < 300
    many = [f"k{n}=v" for n in range(MAX_TERMS)]
    started = time.perf_counter()
    result = cli("catalog", "--catalog", str(folder), *many)
    assert result.exit_code == 2 and len(result.stderr) < 2100, result.stderr[:300]
    near = cli("catalog", "--catalog", str(folder), *[f"torch=9.{n}" for n in range(MAX_TERMS)])
    assert near.exit_code == 1 and len(near.stderr) < 2100
    assert time.perf_counter() - started < 10


def test_repeated_terms_count_once_and_long_words_are_cut_in_the_message() -> None:
    assert len(parse_query(" ".join(["torch=2.1"] * 500))) == 1
    with pytest.raises(UserError) as caught:
        parse_query("x" * 100_000)
    assert len(str(caught.value)) < 300


def test_a_name_too_long_is_one_line(cli: RunCli, tmp_path: Path) -> None:
    """os.stat raises ENAMETOOLONG, which Path.exists/is_dir do not swallow: it was a traceback."""
    long = str(tmp_path / ("a" * 5000))
    line = one_line_exit_2(cli("catalog", "--catalog", long))
    assert len(line) < 2100
    one_line_exit_2(cli("--matrix", long, "plan"))
