"""The static uv a locked image installs with (engine/native_uv.py) and what a build serves it:
the checked binary, its uv.toml, the hash-carrying find-links page (no engine, no network)."""

from __future__ import annotations

import hashlib
import tomllib
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from builder.engine import image_build, native_uv, staging
from builder.engine.secrets import serving
from builder.engine.settings import BuildSettings, PipSources
from tests.fake_engine import FakeEngine
from tests.test_build_logic import A
from tests.test_context import _spec


def _fake_wheel(folder: Path, machine: str = "x86_64", payload: bytes = b"\x7fELF static uv") -> tuple[Path, native_uv.Wheel]:
    """A wheel named like the pinned one, holding `payload` as uv's binary; its pin patched to it."""
    pinned = native_uv.WHEELS[machine]
    path = folder / pinned.filename
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(pinned.member, payload)
        archive.writestr("uv/__init__.py", "")
    return path, native_uv.Wheel(pinned.filename, hashlib.sha256(path.read_bytes()).hexdigest())


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[BuildSettings, Path]:
    folder = tmp_path / "wheels"
    folder.mkdir()
    _, pin = _fake_wheel(folder)
    monkeypatch.setitem(native_uv.WHEELS, "x86_64", pin)
    return BuildSettings(pip=PipSources(local_dirs=(folder,))), folder


def test_the_binary_comes_from_a_local_wheel_checked_and_is_unpacked_once(local: tuple[BuildSettings, Path], tmp_path: Path) -> None:
    settings, folder = local
    tools = tmp_path / "tools"
    uv = native_uv.binary(settings, tools, "x86_64")
    assert uv.read_bytes() == b"\x7fELF static uv" and uv.stat().st_mode & 0o111
    (folder / native_uv.WHEELS["x86_64"].filename).unlink()  # the kept copy serves from now on
    assert native_uv.binary(settings, tools, "x86_64") == uv
    assert (tools / native_uv.WHEELS["x86_64"].filename).is_file()


def test_a_tampered_binary_is_unpacked_again_from_the_checked_wheel(local: tuple[BuildSettings, Path], tmp_path: Path) -> None:
    settings, _ = local
    tools = tmp_path / "tools"
    uv = native_uv.binary(settings, tools, "x86_64")
    uv.write_bytes(b"#!/bin/sh\necho evil\n")
    assert native_uv.binary(settings, tools, "x86_64").read_bytes() == b"\x7fELF static uv"


def test_a_wheel_whose_hash_differs_from_the_pin_is_refused_in_one_line(local: tuple[BuildSettings, Path], tmp_path: Path) -> None:
    settings, folder = local
    _fake_wheel(folder, payload=b"another build")  # same name, other bytes
    with pytest.raises(native_uv.Unavailable) as refused:
        native_uv.binary(settings, tmp_path / "tools", "x86_64")
    assert "sha256 differs from the pinned one" in refused.value.message and "\n" not in refused.value.message
    assert not (tmp_path / "tools" / "uv-0.13.9-x86_64").exists()


def test_an_unreachable_index_says_where_to_put_the_wheel(tmp_path: Path) -> None:
    settings = BuildSettings(pip=PipSources(index_url=f"{(tmp_path / 'no-index').as_uri()}/"))
    with pytest.raises(native_uv.Unavailable) as refused:
        native_uv.binary(settings, tmp_path / "tools", "x86_64")
    assert "could not download uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl" in refused.value.message
    assert "local wheel folder" in refused.value.message


def test_an_engine_without_a_pinned_uv_is_named() -> None:
    with pytest.raises(native_uv.Unavailable, match="no static uv is pinned for a riscv64 engine"):
        native_uv.binary(BuildSettings(), Path("/nonexistent"), "riscv64")


def test_every_pin_is_a_static_musl_wheel_of_this_version() -> None:
    assert set(native_uv.WHEELS) == set(native_uv.PLATFORM_TAG) == {"x86_64", "aarch64"}
    for machine, wheel in native_uv.WHEELS.items():
        assert wheel.filename.startswith(f"uv-{native_uv.VERSION}-py3-none-") and native_uv.PLATFORM_TAG[machine] in wheel.filename
        assert len(wheel.sha256) == 64 and int(wheel.sha256, 16) >= 0


def _staged(uv: bool, index_url: str | None = None) -> staging.Staged:
    return staging.Staged(
        path=Path("/nonexistent"), wheels=(), extra_index_urls=("https://download.pytorch.org/whl/cu130",), index_url=index_url, uv=uv
    )


def test_the_uv_toml_carries_the_pip_conf_sources_and_pips_choice() -> None:
    staged = _staged(True, index_url='https://user:p"w@mirror.example/simple')
    conf = tomllib.loads((staged.served_uv_conf("http://127.0.0.1:1/token/") or b"").decode())
    assert conf == {
        "index-strategy": "unsafe-best-match",
        "index-url": 'https://user:p"w@mirror.example/simple',
        "extra-index-url": ["https://download.pytorch.org/whl/cu130"],
        "find-links": ["http://127.0.0.1:1/token/"],
    }
    assert _staged(False).served_uv_conf("http://127.0.0.1:1/token/") is None, "a pip-installed image is served its pip.conf"


def test_stage_serves_uv_only_to_a_dockerfile_that_installs_with_it(tmp_path: Path) -> None:
    spec = _spec()  # the context tests' numba image
    with_uv = staging.stage(spec, {"Dockerfile": b'FROM x\nARG BUILDER_UV_URL=""\n'}, tmp_path / "a", BuildSettings())
    without = staging.stage(spec, {"Dockerfile": b"FROM x\n"}, tmp_path / "b", BuildSettings())
    assert with_uv.uv and not without.uv


def test_the_find_links_page_names_each_hash_uv_needs(tmp_path: Path) -> None:
    wheel = tmp_path / "numba-0.68.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"PK numba")
    digest = staging.sha256_of(wheel)
    with serving() as server:
        url = server.publish_files({wheel.name: wheel}, {wheel.name: digest})
        page = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10).read().decode()
    assert f'<a href="{wheel.name}#sha256={digest}">' in page


def test_a_changed_wheel_is_hashed_again(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1-py3-none-any.whl"
    wheel.write_bytes(b"one")
    first = staging.sha256_of(wheel)
    assert staging.sha256_of(wheel) == first == hashlib.sha256(b"one").hexdigest()
    wheel.write_bytes(b"two, longer")
    assert staging.sha256_of(wheel) == hashlib.sha256(b"two, longer").hexdigest()


# -- a build through the fake engine: what it is served ------------------------------------------
UV_DOCKERFILE = b'FROM builder-base/debian12:latest\nARG BUILDER_UV_URL=""\nARG BUILDER_UV_CONF_URL=""\n'


def _build(tmp_path: Path, settings: BuildSettings) -> tuple[Mapping[str, str], str]:
    fake = FakeEngine()
    run = image_build.Run(settings=settings, build_dir=tmp_path / "build", lock_dir=tmp_path / "locks")
    result = image_build.build_image(run, fake, A, {"Dockerfile": UV_DOCKERFILE}, force=True)
    assert result.status == "built", result
    (request,) = fake.builds
    return request.buildargs, (run.log_dir / f"{A.id}.log").read_text()


def test_a_uv_dockerfile_is_served_uv_and_its_uv_toml_not_a_pip_conf(local: tuple[BuildSettings, Path], tmp_path: Path) -> None:
    args, log = _build(tmp_path, local[0])
    assert args["BUILDER_UV_URL"].startswith("http://127.0.0.1:") and args["BUILDER_UV_URL"].endswith("/uv")
    assert args["BUILDER_UV_CONF_URL"].startswith("http://127.0.0.1:") and "BUILDER_PIP_CONF_URL" not in args
    assert f"# installer: uv {native_uv.VERSION} (served)" in log
    assert (tmp_path / "build" / "tools" / f"uv-{native_uv.VERSION}-x86_64").is_file()


def test_without_a_uv_the_build_installs_with_pip_and_says_why(tmp_path: Path) -> None:
    """Offline, no uv wheel anywhere: the Dockerfile's pip branch, served its pip.conf (as before uv)."""
    args, log = _build(tmp_path, BuildSettings(pip=PipSources(index_url=f"{(tmp_path / 'no-index').as_uri()}/")))
    assert "BUILDER_UV_URL" not in args and "BUILDER_UV_CONF_URL" not in args
    assert args["BUILDER_PIP_CONF_URL"].startswith("http://127.0.0.1:")
    assert "# installer: pip (could not download uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl" in log
