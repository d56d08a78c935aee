"""Build-context staging: only the pinned local wheels, pip.conf, the CA bundle; which indexes stay.

Pure file work in tmp_path: a find-links folder and a file:// simple index hold small fake wheels
(valid names, arbitrary bytes) for several versions, Pythons and architectures.
"""

from __future__ import annotations

import dataclasses
import platform
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from builder.engine import staging as context
from builder.engine.settings import BuildSettings, PipSources
from builder.engine.staging import local_wheels, needed_indexes, pip_conf, stage
from builder.model.plan import Accelerator, Base, ImageSpec, Install
from builder.render.context import PROBE, PROBE_NAME

ARCH = platform.machine()
OTHER_ARCH = "aarch64" if ARCH == "x86_64" else "x86_64"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
HOST_EXTRA = "https://extra.corp/simple"
MIRROR = "https://mirror.corp/simple"

PACKAGES = ("jax[cuda12]==0.10.2", "numba==0.68.0", "numpy==2.4.6", "requests>=2", "torch==2.13.0+cpu")

# find-links folder: flat *.whl files
FIND_LINKS_WHEELS = (
    # numba: one per python, plus other versions / arch
    f"numba-0.68.0-cp311-cp311-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
    f"numba-0.68.0-cp312-cp312-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
    f"numba-0.68.0-cp311-cp311-manylinux2014_{OTHER_ARCH}.manylinux_2_17_{OTHER_ARCH}.whl",
    "numba-0.68.0-cp311-cp311-macosx_11_0_arm64.whl",
    f"numba-0.67.0-cp311-cp311-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
    f"numba-0.67.0-cp312-cp312-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
    # numpy: abi3 (cp39 fits 3.11 and 3.12, cp313 fits neither), musl and other versions never
    f"numpy-2.4.6-cp39-abi3-manylinux_2_17_{ARCH}.whl",
    f"numpy-2.4.6-cp313-abi3-manylinux_2_17_{ARCH}.whl",
    f"numpy-2.4.6-cp311-cp311-musllinux_1_2_{ARCH}.whl",
    f"numpy-2.4.5-cp39-abi3-manylinux_2_17_{ARCH}.whl",
    f"numpy-2.5.0-cp39-abi3-manylinux_2_17_{ARCH}.whl",
    # jax: pure python
    "jax-0.10.2-py3-none-any.whl",
    "jax-0.10.1-py3-none-any.whl",
    # not pinned by the image (deps, unpinned, unrelated): never copied
    f"jaxlib-0.10.2-cp311-cp311-manylinux_2_27_{ARCH}.whl",
    f"jaxlib-0.10.2-cp312-cp312-manylinux_2_27_{ARCH}.whl",
    "requests-2.32.3-py3-none-any.whl",
    "scipy-1.15.0-cp311-cp311-manylinux_2_17_x86_64.whl",
)
# file:// simple index: simple/<project>/index.html linking ../../files/<wheel>
INDEX_WHEELS = {
    "torch": (
        f"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_{ARCH}.whl",
        f"torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_{ARCH}.whl",
        f"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_{OTHER_ARCH}.whl",
        f"torch-2.13.0+cu126-cp311-cp311-manylinux_2_28_{ARCH}.whl",
        f"torch-2.13.0-cp311-cp311-manylinux_2_28_{ARCH}.whl",
        f"torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_{ARCH}.whl",
        "torch-2.13.0+cpu-cp311-cp311-win_amd64.whl",
    ),
    "numba": (f"numba-0.60.0-cp311-cp311-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",),
}

EXPECTED = {
    "3.11": {
        "jax[cuda12]==0.10.2": "jax-0.10.2-py3-none-any.whl",
        "numba==0.68.0": f"numba-0.68.0-cp311-cp311-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
        "numpy==2.4.6": f"numpy-2.4.6-cp39-abi3-manylinux_2_17_{ARCH}.whl",
        "torch==2.13.0+cpu": f"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_{ARCH}.whl",
    },
    "3.12": {
        "jax[cuda12]==0.10.2": "jax-0.10.2-py3-none-any.whl",
        "numba==0.68.0": f"numba-0.68.0-cp312-cp312-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
        "numpy==2.4.6": f"numpy-2.4.6-cp39-abi3-manylinux_2_17_{ARCH}.whl",
        "torch==2.13.0+cpu": f"torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_{ARCH}.whl",
    },
}


def _wheel(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PK\x03\x04 fake wheel " + path.name.encode())
    return path


@pytest.fixture
def find_links(tmp_path: Path) -> Path:
    folder = tmp_path / "find-links"
    for name in FIND_LINKS_WHEELS:
        _wheel(folder / name)
    return folder


@pytest.fixture
def simple_index(tmp_path: Path) -> Path:
    """root/simple/<project>/index.html with `../../files/NAME` hrefs (percent-encoded, with hashes)."""
    root = tmp_path / "mirror"
    for project, names in INDEX_WHEELS.items():
        links = []
        for name in names:
            _wheel(root / "files" / name)
            href = "../../files/" + name.replace("+", "%2B") + "#sha256=" + "ab" * 32
            links.append(f'    <a href="{href}" data-requires-python="&gt;=3.10">{name}</a><br/>')
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n", encoding="utf-8")
    return root / "simple"


def _spec(python: str = "3.11", packages: tuple[str, ...] = PACKAGES) -> ImageSpec:
    installs = (
        Install("jax", "0.10.2", ("jax[cuda12]==0.10.2",)),
        Install("numba", "0.68.0", ("numba==0.68.0",)),
        Install("torch", "2.13.0", ("torch==2.13.0+cpu",), index_urls=(TORCH_CPU_INDEX,), variant="cpu"),
    )
    image_id = f"mixed-cpu-py{python}-debian12"
    return ImageSpec(
        id=image_id,
        tag=f"ghcr.io/example/gpu-images:{image_id}",
        base=Base("local-debian12", "cpu", "debian12", bootstrap="debootstrap"),
        stack="mixed",
        python=python,
        frameworks=(("jax", "0.10.2"), ("numba", "0.68.0"), ("torch", "2.13.0")),
        installs=installs,
        packages=packages,
        index_urls=(TORCH_CPU_INDEX,),
        accelerator=Accelerator("cpu", None),
        content_hash="sha256:" + "1" * 64,
    )


def _names(found: dict[str, Path]) -> dict[str, str]:
    return {line: path.name for line, path in found.items()}


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def source() -> dict[str, bytes]:
    """A rendered build context, as render hands it to staging (from memory, never images/)."""
    return {
        "Dockerfile": b"FROM builder-base/debian12:latest\n",
        "requirements.txt": ("\n".join(PACKAGES) + "\n").encode(),
        PROBE_NAME: PROBE.read_bytes(),
    }


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "corp-ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nMIIcorp\n-----END CERTIFICATE-----\n", encoding="utf-8")
    return path


def _settings(*dirs: Path, ca: Path | None = None, index_url: str | None = None, extras: tuple[str, ...] = ()) -> BuildSettings:
    return BuildSettings(ca_bundle=ca, pip=PipSources(index_url=index_url, extra_index_urls=extras, local_dirs=dirs))


# -- local_wheels -------------------------------------------------------------------------------
@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_local_wheels_picks_exactly_the_pins_for_the_image_python(python: str, find_links: Path, simple_index: Path) -> None:
    found = local_wheels(_spec(python), (find_links, simple_index))
    assert _names(found) == EXPECTED[python]


def test_local_wheels_paths_point_at_the_files(find_links: Path, simple_index: Path) -> None:
    found = local_wheels(_spec(), (find_links, simple_index))
    assert found["numba==0.68.0"] == find_links / EXPECTED["3.11"]["numba==0.68.0"]
    assert found["torch==2.13.0+cpu"].resolve() == (simple_index.parent / "files" / EXPECTED["3.11"]["torch==2.13.0+cpu"]).resolve()
    assert all(p.is_file() for p in found.values())


def test_local_wheels_from_the_simple_index_alone(simple_index: Path) -> None:
    # numba 0.60.0 is in the index, 0.68.0 is not: only torch fits.
    assert _names(local_wheels(_spec(), (simple_index,))) == {"torch==2.13.0+cpu": EXPECTED["3.11"]["torch==2.13.0+cpu"]}


def test_local_wheels_from_find_links_alone(find_links: Path) -> None:
    expected = {k: v for k, v in EXPECTED["3.11"].items() if not k.startswith("torch")}
    assert _names(local_wheels(_spec(), (find_links,))) == expected


def test_local_wheels_never_takes_unpinned_or_unlisted_projects(find_links: Path, simple_index: Path) -> None:
    found = local_wheels(_spec(), (find_links, simple_index))
    assert "requests>=2" not in found
    names = {p.name for p in found.values()}
    assert not [n for n in names if n.startswith(("requests-", "jaxlib-", "scipy-"))]


def test_local_wheels_version_must_match_exactly_including_the_local_label(find_links: Path, simple_index: Path) -> None:
    spec = _spec(packages=("torch==2.13.0", "torch==2.13.0+cu126", "numba==0.68", "numpy==2.4"))
    found = local_wheels(spec, (find_links, simple_index))
    assert _names(found) == {
        "torch==2.13.0": f"torch-2.13.0-cp311-cp311-manylinux_2_28_{ARCH}.whl",
        "torch==2.13.0+cu126": f"torch-2.13.0+cu126-cp311-cp311-manylinux_2_28_{ARCH}.whl",
        # 0.68 == 0.68.0 in PEP 440
        "numba==0.68": f"numba-0.68.0-cp311-cp311-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl",
    }


def test_local_wheels_no_wheel_for_an_unsupported_python(find_links: Path, simple_index: Path) -> None:
    # 3.10: no cp310 numba/torch; cp39-abi3 numpy and py3 jax still fit.
    assert _names(local_wheels(_spec("3.10"), (find_links, simple_index))) == {
        "jax[cuda12]==0.10.2": "jax-0.10.2-py3-none-any.whl",
        "numpy==2.4.6": f"numpy-2.4.6-cp39-abi3-manylinux_2_17_{ARCH}.whl",
    }


def test_local_wheels_first_folder_wins(tmp_path: Path, find_links: Path) -> None:
    first = tmp_path / "first"
    _wheel(first / "jax-0.10.2-py3-none-any.whl")
    found = local_wheels(_spec(), (first, find_links))
    assert found["jax[cuda12]==0.10.2"] == first / "jax-0.10.2-py3-none-any.whl"
    assert found["numba==0.68.0"].parent == find_links


def test_local_wheels_ignores_junk(tmp_path: Path) -> None:
    folder = tmp_path / "junk"
    _wheel(folder / "not-a-wheel.whl")
    _wheel(folder / "numba-0.68.0.tar.gz")
    (folder / "numba").mkdir()
    (folder / "numba" / "index.html").write_text('<a href="../nowhere.whl">x</a><a>no href</a>', encoding="utf-8")
    spec = _spec(packages=("numba==0.68.0", "this is not a requirement", "numpy"))
    assert local_wheels(spec, (folder,)) == {}
    assert local_wheels(spec, ()) == {}


def test_local_wheels_normalizes_project_names(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    _wheel(folder / "Typing_Extensions-4.12.2-py3-none-any.whl")
    spec = _spec(packages=("typing-extensions==4.12.2",))
    assert _names(local_wheels(spec, (folder,))) == {"typing-extensions==4.12.2": "Typing_Extensions-4.12.2-py3-none-any.whl"}


@pytest.mark.parametrize(
    ("name", "python", "fits"),
    [
        ("x-1.0-py3-none-any.whl", "3.11", True),
        ("x-1.0-py2.py3-none-any.whl", "3.11", True),
        ("x-1.0-py311-none-any.whl", "3.11", True),
        ("x-1.0-py2-none-any.whl", "3.11", False),
        (f"x-1.0-cp311-cp311-linux_{ARCH}.whl", "3.11", True),
        (f"x-1.0-cp311-cp311-manylinux_2_17_{ARCH}.whl", "3.12", False),
        (f"x-1.0-cp312-cp312-manylinux_2_17_{ARCH}.whl", "3.11", False),
        (f"x-1.0-cp38-abi3-manylinux_2_17_{ARCH}.whl", "3.12", True),
        (f"x-1.0-cp312-abi3-manylinux_2_17_{ARCH}.whl", "3.12", True),
        (f"x-1.0-cp313-abi3-manylinux_2_17_{ARCH}.whl", "3.12", False),
        (f"x-1.0-cp311-cp311-manylinux_2_17_{OTHER_ARCH}.whl", "3.11", False),
        (f"x-1.0-cp311-cp311-musllinux_1_2_{ARCH}.whl", "3.11", False),
        ("x-1.0-cp311-cp311-win_amd64.whl", "3.11", False),
        ("x-1.0-cp311-cp311-macosx_14_0_arm64.whl", "3.11", False),
        ("x-1.1-py3-none-any.whl", "3.11", False),  # wrong version
    ],
)
def test_fits(name: str, python: str, fits: bool) -> None:
    assert context.fits(name, Version("1.0"), python) is fits


# -- needed_indexes -----------------------------------------------------------------------------
def test_needed_indexes_drops_a_framework_index_satisfied_locally() -> None:
    spec = _spec()
    assert needed_indexes(spec, {"torch==2.13.0+cpu"}) == ()
    assert needed_indexes(spec, set()) == (TORCH_CPU_INDEX,)
    assert needed_indexes(spec, {"numba==0.68.0", "jax[cuda12]==0.10.2"}) == (TORCH_CPU_INDEX,)


def test_needed_indexes_keeps_an_index_while_any_of_its_requirements_is_remote() -> None:
    install = Install("tensorflow", "2.16.2", ("tensorflow-rocm==2.16.2", "tf-keras==2.16.0"), index_urls=("https://repo.radeon.com/x/",))
    spec = dataclasses.replace(_spec(), installs=(install,), index_urls=("https://repo.radeon.com/x/",))
    assert needed_indexes(spec, {"tensorflow-rocm==2.16.2"}) == ("https://repo.radeon.com/x/",)
    assert needed_indexes(spec, {"tensorflow-rocm==2.16.2", "tf-keras==2.16.0"}) == ()


# -- pip_conf -----------------------------------------------------------------------------------
def test_pip_conf() -> None:
    assert pip_conf(BuildSettings()) == "[global]\ndisable-pip-version-check = true\n"
    assert pip_conf(_settings(index_url=MIRROR), (HOST_EXTRA,)) == (
        f"[global]\ndisable-pip-version-check = true\nindex-url = {MIRROR}\nextra-index-url =\n    {HOST_EXTRA}\n"
    )


# -- stage --------------------------------------------------------------------------------------
def test_stage_serves_the_pinned_wheels_instead_of_copying_them(
    tmp_path: Path, source: dict[str, bytes], find_links: Path, simple_index: Path, ca: Path
) -> None:
    spec = _spec()
    staged = stage(spec, source, tmp_path / "contexts", _settings(find_links, simple_index, ca=ca, index_url=MIRROR, extras=(HOST_EXTRA,)))
    target = tmp_path / "contexts" / spec.id
    expected_wheels = tuple(sorted(EXPECTED["3.11"].values()))
    conf = f"[global]\ndisable-pip-version-check = true\nindex-url = {MIRROR}\nextra-index-url =\n    {HOST_EXTRA}\n"
    assert staged.wheels == expected_wheels and staged.extra_index_urls == (HOST_EXTRA,)
    assert [p.name for p in staged.wheel_files] == list(expected_wheels)
    assert all(p.read_bytes() == b"PK\x03\x04 fake wheel " + p.name.encode() for p in staged.wheel_files)
    # the rendered context alone: no wheel, no pip.conf, no CA bundle, no local.txt (the Dockerfile has
    # one stage, so whatever is copied in is a layer of the image); the CA bundle and the requirements
    # the wheels satisfy are served
    assert _tree(target) == source
    assert staged.served_ca == ca.read_bytes()
    assert staged.served_local is not None and staged.served_local.decode().splitlines() == sorted(EXPECTED["3.11"])
    # the pip.conf is served, with the wheels' page once it is published
    assert staged.pip_conf_to_serve == conf.encode()
    assert staged.served_pip_conf("http://127.0.0.1:1/w/") == (conf + "find-links = http://127.0.0.1:1/w/\n").encode()
    with pytest.raises(RuntimeError):
        staged.served_pip_conf(None)
    assert (target.stat().st_mode & 0o777) == 0o700


def test_stage_without_local_wheels_serves_its_pip_conf(tmp_path: Path, source: dict[str, bytes]) -> None:
    staged = stage(_spec(), source, tmp_path / "contexts", _settings(index_url=MIRROR))
    assert staged.wheel_files == () and staged.served_pip_conf(None) == staged.pip_conf_to_serve
    assert (
        staged.pip_conf_to_serve
        == (f"[global]\ndisable-pip-version-check = true\nindex-url = {MIRROR}\nextra-index-url =\n    {TORCH_CPU_INDEX}\n").encode()
    )
    assert staged.served_local is None and staged.served_ca is None
    assert _tree(staged.path) == source


def test_stage_serves_a_wheel_two_requirements_share_once(
    tmp_path: Path, source: dict[str, bytes], find_links: Path, simple_index: Path
) -> None:
    """`jax[cuda12]==0.10.2` (the plan) and `jax==0.10.2` (what a lock pins) are the same local file."""
    spec = _spec()
    spec = dataclasses.replace(spec, packages=(*spec.packages, "jax==0.10.2"))
    staged = stage(spec, source, tmp_path / "contexts", _settings(find_links, simple_index))
    assert staged.wheels == tuple(sorted(EXPECTED["3.11"].values()))
    assert len(staged.wheel_files) == len(set(staged.wheel_files)) == len(staged.wheels)


def test_stage_serves_a_pip_conf_with_credentials_instead_of_writing_it(tmp_path: Path, source: dict[str, bytes]) -> None:
    secret_index = "https://ci:s3cret@mirror.corp/simple"
    staged = stage(_spec(), source, tmp_path / "contexts", _settings(index_url=secret_index))
    assert not (staged.path / ".builder" / "pip.conf").exists()
    assert staged.pip_conf_to_serve is not None and secret_index.encode() in staged.pip_conf_to_serve
    assert not [p for p in staged.path.rglob("*") if p.is_file() and b"s3cret" in p.read_bytes()]


def test_stage_keeps_the_framework_index_when_its_wheel_is_not_local(tmp_path: Path, source: dict[str, bytes], find_links: Path) -> None:
    staged = stage(_spec(), source, tmp_path / "contexts", _settings(find_links, extras=(HOST_EXTRA,)))
    assert staged.extra_index_urls == (TORCH_CPU_INDEX, HOST_EXTRA)
    assert staged.wheels == tuple(sorted(v for k, v in EXPECTED["3.11"].items() if not k.startswith("torch")))
    assert (
        staged.served_pip_conf("http://127.0.0.1:1/w/")
        == (
            f"[global]\ndisable-pip-version-check = true\nextra-index-url =\n    {TORCH_CPU_INDEX}\n    {HOST_EXTRA}\n"
            "find-links = http://127.0.0.1:1/w/\n"
        ).encode()
    )


def test_stage_does_not_repeat_an_index_the_host_also_names(tmp_path: Path, source: dict[str, bytes], simple_index: Path) -> None:
    with_torch = stage(_spec(), source, tmp_path / "a", _settings(simple_index, extras=(TORCH_CPU_INDEX, HOST_EXTRA)))
    assert with_torch.extra_index_urls == (HOST_EXTRA,)
    without = stage(_spec(), source, tmp_path / "b", _settings(extras=(TORCH_CPU_INDEX, HOST_EXTRA)))
    assert without.extra_index_urls == (TORCH_CPU_INDEX, HOST_EXTRA)


def test_stage_without_local_sources(tmp_path: Path, source: dict[str, bytes]) -> None:
    staged = stage(_spec(), source, tmp_path / "contexts", BuildSettings())
    assert (staged.path, staged.wheels, staged.wheel_files, staged.extra_index_urls) == (
        tmp_path / "contexts" / _spec().id,
        (),
        (),
        (TORCH_CPU_INDEX,),
    )
    assert not (staged.path / ".builder").exists()
    assert staged.pip_conf_to_serve == (f"[global]\ndisable-pip-version-check = true\nextra-index-url =\n    {TORCH_CPU_INDEX}\n").encode()


def test_stage_for_python_312_takes_cp312_wheels(tmp_path: Path, find_links: Path, simple_index: Path) -> None:
    spec = _spec("3.12")
    staged = stage(spec, {"Dockerfile": b"FROM x\n"}, tmp_path / "contexts", _settings(find_links, simple_index))
    assert staged.wheels == tuple(sorted(EXPECTED["3.12"].values()))
    assert [p.name for p in staged.wheel_files] == list(staged.wheels)
    assert staged.extra_index_urls == ()


def test_stage_replaces_a_stale_staging_folder(tmp_path: Path, source: dict[str, bytes], find_links: Path) -> None:
    stale = tmp_path / "contexts" / _spec().id
    (stale / ".builder" / "wheels").mkdir(parents=True)
    (stale / ".builder" / "wheels" / "old-1.0-py3-none-any.whl").write_bytes(b"old")
    (stale / "leftover.txt").write_text("x", encoding="utf-8")
    staged = stage(_spec(), source, tmp_path / "contexts", _settings(find_links))
    assert not (staged.path / "leftover.txt").exists()
    assert not (staged.path / ".builder" / "wheels").exists()


def test_stage_leaves_the_wheelhouse_untouched(tmp_path: Path, source: dict[str, bytes], find_links: Path, simple_index: Path) -> None:
    before = (_tree(find_links), _tree(simple_index.parent))
    staged = stage(_spec(), source, tmp_path / "contexts", _settings(find_links, simple_index))
    shutil.rmtree(staged.path)  # what build_one does afterwards
    assert (_tree(find_links), _tree(simple_index.parent)) == before


@pytest.mark.timeout(20)
def test_a_fifo_or_device_named_like_a_wheel_is_no_wheel(tmp_path: Path) -> None:
    """Found by the second hostile pass: a FIFO in --wheelhouse named like a pinned wheel hung `builder
    lock` (its sha256 read) past SIGTERM, for ten minutes until SIGKILL. Only regular files are wheels."""
    import os

    from builder.util.errors import UserError

    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    os.mkfifo(folder / EXPECTED["3.11"]["numba==0.68.0"])
    (folder / EXPECTED["3.11"]["torch==2.13.0+cpu"].replace("+", "%2B")).symlink_to("/dev/zero")
    assert local_wheels(_spec(), (folder,)) == {}
    with pytest.raises(UserError, match="not a regular file"):
        context.sha256_of(folder / EXPECTED["3.11"]["numba==0.68.0"])


def test_a_single_stage_build_gets_every_setting_served_and_none_in_its_context(
    tmp_path: Path, source: dict[str, bytes], find_links: Path, ca: Path
) -> None:
    """Every Dockerfile (an image's, a team environment's) has one stage: a CA bundle or pip.conf in
    its context would be a layer of the image itself, so both are served like the local wheels."""
    staged = stage(_spec(), source, tmp_path / "contexts", _settings(find_links, ca=ca, index_url=MIRROR))
    assert staged.served_ca == ca.read_bytes()
    assert staged.pip_conf_to_serve is not None and MIRROR.encode() in staged.pip_conf_to_serve
    assert not (staged.path / ".builder" / "ca.pem").exists() and not (staged.path / ".builder" / "pip.conf").exists()
    plain = stage(_spec(), source, tmp_path / "plain", _settings(ca=ca, index_url=MIRROR))
    assert plain.wheel_files == () and plain.pip_conf_to_serve is not None and plain.served_pip_conf(None) == plain.pip_conf_to_serve


def test_only_a_dockerfile_whose_apt_step_copies_the_ca_bundle_gets_it_in_its_context(
    tmp_path: Path, source: dict[str, bytes], ca: Path
) -> None:
    """An apt step (templates/partials/python.j2) runs before there is a Python to fetch the bundle
    with: that Dockerfile, and only it, finds the public CA bundle in its context; nothing else."""
    apt = {**source, "Dockerfile": b"FROM ubuntu:24.04\nCOPY requirements.txt " + context.APT_CA_COPY + b" /tmp/builder-ca/\n"}
    staged = stage(_spec(), apt, tmp_path / "apt", _settings(ca=ca, index_url=MIRROR))
    assert _tree(staged.path) == {**apt, ".builder/ca.pem": ca.read_bytes()}
    assert staged.served_ca == ca.read_bytes()  # the venv step still fetches it
    no_ca = stage(_spec(), apt, tmp_path / "no-ca", _settings(index_url=MIRROR))
    assert _tree(no_ca.path) == apt and no_ca.served_ca is None
