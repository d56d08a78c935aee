"""usecases/layers.py (offline): which wheels a canonical image's venv layer is made of, the wheel
cache by sha256, and the layer maker `builder build` calls, against a fake index (no network)."""

from __future__ import annotations

import hashlib
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from builder.engine.image_build import BuildResult, LayerFailed
from builder.engine.port import Layer
from builder.lock.layer import SEED
from builder.lock.wheels import IndexFile
from builder.model.sources import BuildSettings
from builder.updates.wheelfiles import FetchFailed
from builder.usecases import layers
from builder.usecases.build import with_line_shares
from tests.fake_engine import BASE_LAYER, FakeEngine
from tests.test_canonical_layer import SPEC, make_wheel


class FakeFiles:
    """WheelFiles' two calls: what an index lists for a project, and one file fetched (sha256-checked)."""

    def __init__(self, listed: dict[str, list[IndexFile]], data: dict[str, bytes]) -> None:
        self.listed = listed
        self.data = data  # url -> bytes served
        self.fetches: list[str] = []

    def files(self, name: str) -> list[IndexFile]:
        return self.listed.get(name, [])

    def first(self, name: str, choose: Callable[[list[IndexFile]], IndexFile | None]) -> IndexFile | None:
        return choose(self.files(name))  # one source here

    def fetch(self, file: IndexFile, sha256: str, folder: Path) -> Path:
        self.fetches.append(file.url)
        if file.url.startswith("file://"):  # read where it lies, as WheelFiles does
            local = Path(file.url.removeprefix("file://"))
            assert hashlib.sha256(local.read_bytes()).hexdigest() == sha256
            return local
        data = self.data[file.url]
        if hashlib.sha256(data).hexdigest() != sha256:
            raise FetchFailed(f"{file.url} is not the file the lock pins (its sha256 differs); check the index or mirror")
        out = folder / "wheel.whl"
        out.write_bytes(data)
        return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_only_a_locked_image_the_policy_names_is_canonical() -> None:
    assert layers.canonical(SPEC)
    assert not layers.canonical(replace(SPEC, canonical=None))
    assert not layers.canonical(replace(SPEC, lock=None))  # the policy needs a lock to make the layer from


def test_a_remote_wheel_is_fetched_once_and_kept_by_its_sha256(tmp_path: Path) -> None:
    data = b"wheel bytes"
    file = IndexFile("numba-0.68.0-py3-none-any.whl", "https://index.example/numba.whl", _sha(data))
    fake = FakeFiles({}, {file.url: data})
    cache = layers.WheelCache(fake, tmp_path / "wheels")  # type: ignore[arg-type]
    first = cache.get(file, _sha(data))
    assert first == tmp_path / "wheels" / _sha(data) / file.filename and first.read_bytes() == data
    assert cache.get(file, _sha(data)) == first and fake.fetches == [file.url] and cache.fetched == 1
    first.write_bytes(b"changed on disk")  # a kept file that is no longer the lock's is fetched again
    assert cache.get(file, _sha(data)).read_bytes() == data and cache.fetched == 2
    assert not list((tmp_path / "wheels").rglob("*.part"))


def test_two_builds_that_need_one_remote_wheel_at_once_fetch_it_once(tmp_path: Path) -> None:
    """`build -j 2` of two arm64 images that both pin numpy (seen: the second rename found no .part)."""
    data = b"numpy wheel"
    file = IndexFile("numpy-2.4.6-cp311-cp311-manylinux_2_28_aarch64.whl", "https://index.example/numpy.whl", _sha(data))
    fake = FakeFiles({}, {file.url: data})
    slow = fake.fetch

    def fetch(file: IndexFile, sha256: str, folder: Path) -> Path:
        time.sleep(0.2)  # both threads are in get() while the first downloads
        return slow(file, sha256, folder)

    fake.fetch = fetch  # type: ignore[method-assign]
    cache = layers.WheelCache(fake, tmp_path / "wheels")  # type: ignore[arg-type]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: cache.get(file, _sha(data)), range(2)))
    assert got == [tmp_path / "wheels" / _sha(data) / file.filename] * 2 and got[0].read_bytes() == data
    assert fake.fetches == [file.url] and cache.fetched == 1
    assert not [p for p in (tmp_path / "wheels").rglob("*") if p.name.endswith(".part")]


def test_a_local_wheel_is_read_where_it_lies(tmp_path: Path) -> None:
    data = b"local wheel"
    (tmp_path / "numba.whl").write_bytes(data)
    file = IndexFile("numba-0.68.0-py3-none-any.whl", f"file://{tmp_path}/numba.whl", _sha(data))
    fake = FakeFiles({}, {})
    cache = layers.WheelCache(fake, tmp_path / "wheels")  # type: ignore[arg-type]
    assert cache.get(file, _sha(data)) == tmp_path / "numba.whl"
    assert fake.fetches == [file.url] and cache.fetched == 0 and not (tmp_path / "wheels").exists()


def test_the_locked_wheels_are_the_targets_with_the_seed_and_a_missing_one_is_named(tmp_path: Path) -> None:
    numba, pip = b"numba wheel", b"pip wheel"
    assert SPEC.lock is not None
    spec = replace(SPEC, lock=replace(SPEC.lock, hashes=(("numba", (_sha(numba),)),)))
    listed = {
        "numba": [
            IndexFile("numba-0.68.0.tar.gz", "https://i/numba.tar.gz", _sha(numba)),  # not a wheel: never picked
            IndexFile("numba-0.68.0-cp311-cp311-manylinux_2_17_x86_64.whl", "https://i/numba.whl", _sha(numba)),
        ],
        "pip": [IndexFile(f"pip-{SEED[1]}-py3-none-any.whl", "https://i/pip.whl", SEED[2])],
    }
    fake = FakeFiles(listed, {"https://i/numba.whl": numba, "https://i/pip.whl": pip})
    with pytest.raises(FetchFailed, match="pip.whl is not the file the lock pins"):  # the seed is pinned by its sha256 too
        layers.locked_wheels(spec, layers.WheelCache(fake, tmp_path / "a"))  # type: ignore[arg-type]
    assert fake.fetches == ["https://i/numba.whl", "https://i/pip.whl"]

    listed["numba"] = listed["numba"][:1]
    with pytest.raises(LayerFailed, match=r"^numba==0\.68\.0: no file the sources list with the lock's hashes is a wheel for x86_64"):
        layers.locked_wheels(spec, layers.WheelCache(FakeFiles(listed, {}), tmp_path / "b"))  # type: ignore[arg-type]


def test_no_canonical_image_no_layer_maker() -> None:
    assert layers.layer_maker([replace(SPEC, canonical=None)], BuildSettings(), Path("/nonexistent")) is None


def test_the_layer_maker_gives_the_layer_unwritten_and_names_a_fetch_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = make_wheel(tmp_path)
    monkeypatch.setattr(layers, "locked_wheels", lambda spec, cache: [wheel])
    make = layers.layer_maker([SPEC], BuildSettings(), tmp_path / "wheels")
    assert make is not None
    before = sorted(tmp_path.rglob("*"))
    made = make(SPEC)
    assert list(made) == ["venv.tar"], "a lock with no NVIDIA wheels is one layer"
    assert sorted(tmp_path.rglob("*")) == before, "nothing is written until the layer is read"
    made["venv.tar"].write(tmp_path / "venv.tar")
    with tarfile.open(tmp_path / "venv.tar") as tar:
        names = tar.getnames()
    assert "opt/venv/pyvenv.cfg" in names and any(n.endswith("site-packages/toy/__init__.py") for n in names)
    assert [m.name for m in made["venv.tar"].members()] == names

    def refused(spec: object, cache: object) -> list[Path]:
        raise FetchFailed("https://i/numba.whl is not the file the lock pins (its sha256 differs); check the index or mirror")

    monkeypatch.setattr(layers, "locked_wheels", refused)
    with pytest.raises(LayerFailed, match="sha256 differs"):
        make(SPEC)


def test_the_build_results_say_what_each_image_shares_with_its_line() -> None:
    """usecases/build.py with_line_shares, against the fake engine: two images of a line on one NVIDIA
    layer, a third image of the line built before (not in this run), another line's image apart."""
    engine = FakeEngine()
    base = engine.add_image("sha256:base", SPEC.base.from_ref)
    nvidia, mb = b"the NVIDIA layer", 1_000_000
    specs = [replace(SPEC, id=name, tag=f"reg/x:{name}") for name in ("numba", "torch", "jax")]
    other = replace(SPEC, id="arm", tag="reg/x:arm", python="3.12")
    for spec, layers_of, written in (
        (specs[0], [nvidia, b"numba venv"], [500, 100]),
        (specs[1], [nvidia, b"torch venv"], [500, 300]),
        (specs[2], [b"another NVIDIA layer", b"jax venv"], [700, 200]),
        (other, [nvidia, b"arm venv"], [500, 50]),
    ):
        image = engine.add_image(f"sha256:{spec.id}", spec.tag)
        engine.layers[image] = [BASE_LAYER, *layers_of]
        engine.histories[image] = [Layer("ADD venv.tar", written[1] * mb), Layer("ADD nvidia.tar", written[0] * mb), Layer("", 169 * mb)]
    assert engine.resolve(SPEC.base.from_ref) == base
    sized = {"image_mb": 1.0, "venv_mb": 1.0, "base_mb": 169.0, "ratio": 1.0}
    results = [BuildResult("numba", "built", sizes=sized), BuildResult("torch", "up-to-date", sizes=sized), BuildResult("arm", "failed")]

    def connect(timeout: int = 60) -> FakeEngine:
        return engine

    out = {r.id: r for r in with_line_shares(connect, results, specs[:2] + [other], [*specs, other])}
    assert out["numba"].sizes == {**sized, "shared_mb": 500.0, "own_mb": 100.0}
    assert out["torch"].sizes == {**sized, "shared_mb": 500.0, "own_mb": 300.0}, "jax is of the line too, with its own NVIDIA layer"
    assert out["arm"].sizes is None, "a failed build has no sizes, and another Python is another line"
