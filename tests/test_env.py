"""Team environments offline (builder/env/, builder/usecases/env.py): the env file's validation, the
lock on the base's lock as constraints (and its refusals), the derived Dockerfile's determinism,
the shell line and the devcontainer file against the Dev Container schema. uv is replaced by
what it would print; the real resolution and build are tests/integration/test_team_env.py's."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest

from builder.catalog.store import Catalog
from builder.env import base as bases
from builder.env import shell
from builder.env.derive import derived_spec
from builder.env.envfile import EnvFile, load
from builder.env.render import LOCK_LABEL, build_context, dockerfile
from builder.lock import files
from builder.lock.files import REQUIREMENTS, Contents, Package
from builder.lock.resolve import LockFailed
from builder.lock.target import LockTarget
from builder.model.results import GpuUse, SmokeResult, TestCounts
from builder.publish.signing import Signers
from builder.usecases import env as envs
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import record
from tests.usecase_fixtures import MATRIX

IMAGE = "numba0.68.0-cpu-py3.11-debian12"
NEWER = "numba0.68.1-cpu-py3.11-debian12"
DIGEST = "127.0.0.1:5000/gpu-images@sha256:" + "d" * 64


def h(char: str) -> str:
    return char * 64


def base_lock_text(image: str = IMAGE, numpy: str = "2.4.6") -> str:
    packages = (
        Package("llvmlite", "0.50.0", (h("1"),), ("numba",)),
        Package("numba", "0.68.0", (h("2"),), (REQUIREMENTS,)),
        Package("numpy", numpy, (h("3"),), (REQUIREMENTS, "numba")),
    )
    return files.write(Contents(image, "sha256:" + h("0"), "3.11", "x86_64-manylinux_2_36", packages))


def uv_output(numpy: str = "2.4.6", numpy_hash: str = h("3")) -> str:
    """What `uv pip compile` prints for six + pandas on top of the base (its own form, before lock_text)."""
    return (
        f"numpy=={numpy} \\\n    --hash=sha256:{numpy_hash}\n    # via\n    #   -c constraints.txt\n    #   pandas\n"
        f"pandas==3.1.1 \\\n    --hash=sha256:{h('5')}\n    # via -r requirements.in\n"
        f"six==1.17.0 \\\n    --hash=sha256:{h('6')}\n    # via -r requirements.in\n"
    )


@pytest.fixture
def team(tmp_path: Path) -> tuple[Workspace, Catalog, Path]:
    """A workspace with no matrix (the records alone say what the bases are), the base's lock in
    images/, a catalog of the base and a newer record of its line, and a team folder."""
    ws = Workspace(tmp_path / "repo" / "matrix.yaml")
    text = base_lock_text()
    (ws.images_dir / IMAGE).mkdir(parents=True)
    (ws.images_dir / IMAGE / "requirements.lock").write_text(text)
    catalog = Catalog(tmp_path / "repo" / "catalog")
    old = record(IMAGE, stack="numba", frameworks={"numba": "0.68.0"}, lock_sha256=hashlib.sha256(text.encode()).hexdigest(), digest=DIGEST)
    new = record(
        NEWER, stack="numba", frameworks={"numba": "0.68.1"}, lock_sha256="e" * 64, published="2026-12-02T10:05:00Z",
        digest="127.0.0.1:5000/gpu-images@sha256:" + "f" * 64,
    )  # fmt: skip
    catalog.add([old, new], {IMAGE: "# base\n", NEWER: "# newer\n## pip freeze\nnumba==0.68.1\nnumpy==2.5.0\n## dpkg\nbash 5\n"})
    folder = tmp_path / "team"
    folder.mkdir()
    return ws, catalog, folder


def write_env(folder: Path, body: str) -> EnvFile:
    (folder / "gpu-env.yaml").write_text(body)
    return load(folder / "gpu-env.yaml")


UNSIGNED = Signers(None, "not verified: the catalog has no signatures and no allowed_signers")
GOOD = "name: vision\nbase: numba=0.68.0\nrequirements:\n  - six==1.17.0\n  - pandas\napt: [git]\nworkdir: /work\n"


# -- the env file --------------------------------------------------------------------------------------


def test_env_file_reads_every_field(tmp_path: Path) -> None:
    env = write_env(tmp_path, GOOD)
    assert (env.name, env.base, env.requirements, env.apt, env.workdir) == (
        "vision",
        "numba=0.68.0",
        ("six==1.17.0", "pandas"),
        ("git",),
        "/work",
    )
    assert (env.id, env.tag, env.base_digest, env.requirement_lines) == ("env-vision", "builder-env/vision:latest", None, (4, 5))


def test_env_file_name_defaults_to_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Team Alpha"
    folder.mkdir()
    assert write_env(folder, "base: numba=0.68\n").name == "team-alpha"


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("base: numba=0.68\nimage: x\n", 2, "unknown key 'image'"),
        ("requirements: [six]\n", 1, "no base"),
        ("base: repo@sha256:abc\n", 1, "repository@sha256:<64 hex digits>"),
        ("base: numba=0.68\nrequirements:\n  - six\n  - six==1.0\n", 4, "listed twice (first on line 3)"),
        ("base: numba=0.68\nrequirements:\n  - --index-url=http://evil\n", 3, "pip option"),
        ("base: numba=0.68\nrequirements:\n  - pkg @ https://example.com/p.whl\n", 3, "names a URL"),
        ("base: numba=0.68\nrequirements:\n  - 'six; rm -rf /'\n", 3, "not a PEP 508 requirement"),
        ("base: numba=0.68\napt: [git, 'curl; rm -rf /']\n", 2, "not a Debian package name"),
        ("base: numba=0.68\napt: ['git=1:2.39']\n", 2, "not a Debian package name"),
        ("base: numba=0.68\nworkdir: /work/../etc\n", 2, "absolute folder"),
        ("base: numba=0.68\nworkdir: 'relative'\n", 2, "absolute folder"),
        ("base: numba=0.68\nname: Bad Name\n", 2, "is not a name"),
    ],
)
def test_env_file_refuses_with_file_line_and_fix(tmp_path: Path, body: str, line: int, words: str) -> None:
    with pytest.raises(UserError) as caught:
        write_env(tmp_path, body)
    assert (caught.value.file, caught.value.line) == (str(tmp_path / "gpu-env.yaml"), line)
    assert words in caught.value.message and "\n" not in str(caught.value)


def test_env_file_takes_a_digest(tmp_path: Path) -> None:
    assert write_env(tmp_path, f"base: {DIGEST}\n").base_digest == DIGEST


# -- the base's lock and the environment's ---------------------------------------------------------------


def test_base_lock_must_be_the_published_one(team: tuple[Workspace, Catalog, Path]) -> None:
    _, catalog, _ = team
    old = catalog.load()[0]
    with pytest.raises(UserError, match="not the lock record"):
        bases.from_lock(old, base_lock_text(numpy="2.4.5"), "requirements.lock")
    found = bases.from_lock(old, base_lock_text(), "requirements.lock")
    assert found.constraints == ("llvmlite==0.50.0", "numba==0.68.0", "numpy==2.4.6") and found.python == "3.11"


def test_base_lock_from_a_manifest_has_versions_only(team: tuple[Workspace, Catalog, Path]) -> None:
    ws, catalog, _ = team
    newer = envs.base_lock(ws, catalog, catalog.load()[1])
    assert newer.lock.pins == (("numba", "0.68.1"), ("numpy", "2.5.0")) and newer.lock.hashes == ()
    assert newer.lock.platform == "x86_64-manylinux_2_36" and newer.lock.source.endswith(f"manifests/{NEWER}.txt")


def test_lock_resolves_with_every_base_pin_as_a_constraint(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, catalog, folder = team
    env = write_env(folder, GOOD)
    asked: list[LockTarget] = []

    def fake_resolve(target: LockTarget, *args: object, **kwargs: object) -> str:
        asked.append(target)
        return uv_output()

    monkeypatch.setattr(envs, "resolve", fake_resolve)
    done = envs.lock_env(ws, catalog, env, UNSIGNED)
    assert asked[0].constraints == ("llvmlite==0.50.0", "numba==0.68.0", "numpy==2.4.6")
    assert (asked[0].requirements, asked[0].python) == (("six==1.17.0", "pandas"), "3.11")
    assert (done.status, done.base, done.added) == ("locked", IMAGE, (("pandas", "3.1.1"), ("six", "1.17.0")))
    text = env.lock_path.read_text()
    assert text.startswith("# GENERATED by `builder env lock` for env-vision:") and f"--hash=sha256:{h('6')}" in text
    assert envs.lock_env(ws, catalog, env, UNSIGNED).status == "current" and len(asked) == 1, "a current lock is not re-resolved"
    with pytest.raises(UserError, match="not `builder lock`"):  # an env lock is no image's lock
        files.verify(files.load(text, "x"), replace(asked[0], image="env-vision"), "x")


@pytest.mark.parametrize(
    ("numpy", "digest", "words"),
    [("2.5.0", h("3"), "would replace the base's numpy==2.4.6"), ("2.4.6", h("9"), "hashes the base")],
)
def test_a_lock_that_moves_a_base_package_is_refused(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch, numpy: str, digest: str, words: str
) -> None:
    """uv keeps constraints; this guards the lock even if a resolver (or a hand) did not."""
    ws, catalog, folder = team
    env = write_env(folder, GOOD)
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output(numpy, digest))
    monkeypatch.setattr(files, "verify", lambda *a, **k: None)  # the constraint check would catch a version first
    with pytest.raises(UserError, match=words):
        envs.lock_env(ws, catalog, env, UNSIGNED)
    assert not env.lock_path.exists(), "nothing half-written"


def test_a_conflicting_requirement_is_refused_naming_the_conflict_and_where_it_fits(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = write_env(folder, "base: numba=0.68.0\nrequirements:\n  - six\n  - numpy>2.4.6\n")
    reason = "Because you require numpy>2.4.6 and numpy==2.4.6, we can conclude that your requirements are unsatisfiable."

    def refuse(*args: object, **kwargs: object) -> str:
        raise LockFailed("unresolvable", reason)

    monkeypatch.setattr(envs, "resolve", refuse)
    with pytest.raises(UserError) as caught:
        envs.lock_env(ws, catalog, env, UNSIGNED)
    assert (caught.value.line, "\n" in caught.value.message) == (4, False)
    assert "numpy>2.4.6 (the base pins 2.4.6)" in caught.value.message and IMAGE in caught.value.message
    assert f"records where it would fit: {NEWER}" in caught.value.message
    assert not env.lock_path.exists()


def test_conflicts_reads_the_ranges_a_resolver_asked_of_base_packages() -> None:
    base = bases.BaseLock(IMAGE, "3.11", "p", (("numpy", "2.4.6"), ("scipy", "1.15.0")), (), "x")
    message = "Because foo==1.0 depends on numpy>=3,<4 and scipy>=1.10 and you require numpy==2.4.6, ..."
    assert bases.conflicts(message, base) == [("numpy", ">=3,<4")]
    assert bases.fits(replace(base, pins=(("numpy", "3.1.0"),)), [("numpy", ">=3,<4")])


def test_upgrade_moves_a_digest_base_to_the_newest_record_of_its_line(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = write_env(folder, f"base: {DIGEST}  # pinned\nrequirements: [six==1.17.0]\n")
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: f"six==1.17.0 \\\n    --hash=sha256:{h('6')}\n    # via -r requirements.in\n")
    assert envs.lock_env(ws, catalog, env, UNSIGNED).base == IMAGE
    done = envs.lock_env(ws, catalog, env, UNSIGNED, upgrade=True)
    assert (done.base, done.moved_from) == (NEWER, DIGEST)
    assert (folder / "gpu-env.yaml").read_text().startswith(f"base: {catalog.load()[1].digest}  # pinned\n"), "only the digest changed"
    assert envs.locked_base(ws, catalog, load(env.path))[0].record.id == NEWER


def test_a_query_base_stays_on_the_record_it_was_locked_on(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, catalog, folder = team
    env = write_env(folder, "base: numba=0.68\nrequirements: [six==1.17.0]\n")
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: f"six==1.17.0 \\\n    --hash=sha256:{h('6')}\n    # via -r requirements.in\n")
    monkeypatch.setattr(envs, "candidates", lambda c, e: [catalog.load()[0]])  # locked when only the old record existed
    envs.lock_env(ws, catalog, env, UNSIGNED)
    monkeypatch.undo()
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: f"six==1.17.0 \\\n    --hash=sha256:{h('6')}\n    # via -r requirements.in\n")
    assert envs.locked_base(ws, catalog, env)[0].record.id == IMAGE, "a newer record does not move a locked environment"
    done = envs.lock_env(ws, catalog, env, UNSIGNED, upgrade=True)
    assert (done.base, done.moved_from) == (NEWER, DIGEST)


def test_an_edited_env_file_is_relocked_on_the_same_base(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, catalog, folder = team
    env = write_env(folder, GOOD.replace("numba=0.68.0", "numba=0.68"))
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output())
    monkeypatch.setattr(envs, "candidates", lambda c, e: [catalog.load()[0]])
    envs.lock_env(ws, catalog, env, UNSIGNED)
    monkeypatch.undo()
    asked: list[LockTarget] = []

    def fake_resolve(target: LockTarget, *args: object, **kwargs: object) -> str:
        asked.append(target)
        return uv_output()

    monkeypatch.setattr(envs, "resolve", fake_resolve)
    edited = write_env(
        folder, GOOD.replace("numba=0.68.0", "numba=0.68").replace("  - pandas\n", "  - pandas\n  - six\n").replace("  - six==1.17.0\n", "")
    )
    done = envs.lock_env(ws, catalog, edited, UNSIGNED)
    assert (done.base, done.moved_from, asked[0].constraints[-1]) == (IMAGE, None, "numpy==2.4.6"), "not moved to the newer record"


def test_a_stale_lock_is_refused_before_a_build(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, catalog, folder = team
    env = write_env(folder, GOOD)
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output())
    envs.lock_env(ws, catalog, env, UNSIGNED)
    edited = write_env(folder, GOOD.replace("  - pandas\n", "  - pandas\n  - rich\n"))
    with pytest.raises(UserError, match="is stale"):
        envs.prepare(ws, catalog, edited, UNSIGNED)


# -- the derived image ---------------------------------------------------------------------------------


def test_dockerfile_is_from_the_digest_installs_only_the_lock_and_is_deterministic(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = write_env(folder, GOOD)
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output())
    envs.lock_env(ws, catalog, env, UNSIGNED)
    first, again = envs.prepare(ws, catalog, env, UNSIGNED), envs.prepare(ws, catalog, env, UNSIGNED)
    assert first.context == again.context, "render is deterministic"
    text = first.context.files["Dockerfile"].decode()
    assert f"FROM {DIGEST}\n" in text and text.count("FROM ") == 1
    assert "--require-hashes --no-deps -r /tmp/builder/requirements.lock" in text and "pip check" in text
    assert "install -y --no-install-recommends git;" in text and text.rstrip().endswith("WORKDIR /work")
    assert text.rstrip().splitlines()[-2] == "USER app", "non-root like the base"
    lock_sha = hashlib.sha256(env.lock_path.read_bytes()).hexdigest()
    assert f'{LOCK_LABEL}="{lock_sha}"' in text and f'io.builder.env.base="{DIGEST}"' in text
    assert first.spec.tag == "builder-env/vision:latest" and first.spec.base.from_ref == DIGEST
    assert first.spec.content_hash == first.context.content_hash and first.spec.frameworks == (("numba", "0.68.0"),)
    other = build_context(env, DIGEST, IMAGE, replace(first.lock, text=first.lock.text + "# x\n"))
    assert other.content_hash != first.context.content_hash, "the hash covers the lock"


def test_dockerfile_refuses_a_tag_for_a_base(tmp_path: Path) -> None:
    env = write_env(tmp_path, GOOD)
    lock = files.load(base_lock_text(), "x")
    with pytest.raises(UserError, match="never a tag"):
        dockerfile(env, "127.0.0.1:5000/gpu-images:latest", IMAGE, lock)


def test_derived_spec_keeps_the_planned_pins(tmp_path: Path) -> None:
    env = write_env(tmp_path, GOOD)
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    planned = next(s for s in Workspace(tmp_path / "matrix.yaml").plan.images if s.id == IMAGE)
    derived = derived_spec(env, record(IMAGE, digest=DIGEST), planned, "sha256:" + h("a"))
    assert (derived.id, derived.packages, derived.installs) == ("env-vision", planned.packages, planned.installs)
    assert derived.base.from_ref == DIGEST and derived.base.bootstrap is None
    # an environment installs its own packages with a RUN on its base: never a canonical (reproducible) image,
    # even where the base image was one (matrix.yaml canonical_layers)
    assert derived_spec(env, record(IMAGE, digest=DIGEST), replace(planned, canonical="a reason"), "sha256:" + h("a")).canonical is None


@pytest.mark.parametrize(
    ("base", "derived", "attached", "same"),
    [
        ("passed", "passed", False, True),
        ("passed", "gpu-skipped", False, True),
        ("gpu-skipped", "passed", True, False),
        ("passed", "failed", False, False),
    ],
)
def test_verdicts_must_be_the_bases(base: str, derived: str, attached: bool, same: bool) -> None:
    smoke = SmokeResult("env-x", "t", derived, GpuUse(attached, "no NVIDIA GPU"), 1.0, tests=TestCounts(3, 0, 0, 0))  # type: ignore[arg-type]
    assert envs.compare(smoke, record(IMAGE, verdict=base)).same is same


# -- opening it ----------------------------------------------------------------------------------------


def test_shell_line_and_devcontainer_carry_the_gpu_flags(tmp_path: Path) -> None:
    env = write_env(tmp_path, GOOD)
    argv = shell.run_argv(env, env.tag, ["--gpus", "all"], Path("/home/me/proj"), 1000, 1000)
    line = shell.run_line(argv)
    assert line.startswith("docker run --rm -it --gpus all --user 1000:1000 ")
    assert "--mount type=bind,source=/home/me/proj,target=/work --workdir /work builder-env/vision:latest bash" in line
    doc = shell.devcontainer(env, env.tag, ["--gpus", "all"], "cuda")
    assert doc["runArgs"] == ["--gpus", "all"] and doc["hostRequirements"] == {"gpu": True}
    envs.check_devcontainer(doc)
    jsonschema.Draft201909Validator.check_schema(shell.schema())
    assert json.loads(shell.devcontainer_text(doc)) == doc


def test_devcontainer_schema_refuses_what_the_spec_refuses(tmp_path: Path) -> None:
    env = write_env(tmp_path, GOOD)
    doc = shell.devcontainer(env, env.tag, [], "cpu")
    for broken in (
        {**doc, "runArgs": "--gpus all"},
        {k: v for k, v in doc.items() if k != "image"},
        {**doc, "hostRequirements": {"gpu": "yes"}},
    ):
        with pytest.raises(Exception, match="Dev Container schema"):
            envs.check_devcontainer(broken)


def test_shell_refuses_a_host_the_base_does_not_fit(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.fit.host import FitHost
    from builder.util.errors import RunFailure

    ws, catalog, folder = team
    env = write_env(folder, GOOD)
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output())
    envs.lock_env(ws, catalog, env, UNSIGNED)
    with pytest.raises(RunFailure, match="does not fit this host"):
        envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED, fit_host=FitHost("arm64", "none", (), None))
    assert not (folder / ".devcontainer").exists()


# -- build and test through the in-memory engine -----------------------------------------------------------


class NoLines:
    def line(self, image: str, text: str) -> None: ...


def test_build_then_test_through_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workspace that plans the base (its lock in images/), an env on its record: built once (FROM
    the digest, with the env's labels), up to date the second time, and tested with the base's checks."""
    import subprocess

    from builder.host import facts as hostinfo
    from builder.render.tree import write_tree
    from tests.fake_engine import FakeEngine, connect_to
    from tests.usecase_fixtures import HOST, OFFLINE, Checks, Probe

    (tmp_path / "matrix.yaml").write_text(MATRIX)
    ws = Workspace(tmp_path / "matrix.yaml")
    planned = next(s for s in ws.plan.images if s.id == IMAGE)
    text = base_lock_text()
    ws = ws.with_locks({IMAGE: files.load(text, "x")})
    write_tree(ws.images_dir, ws.rendered_tree())
    catalog = Catalog(tmp_path / "catalog")
    sha = hashlib.sha256(text.encode()).hexdigest()
    catalog.add([record(IMAGE, stack="numba", frameworks={"numba": "0.68.0"}, lock_sha256=sha, digest=DIGEST)], {})
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output())
    (tmp_path / "team").mkdir()
    env = write_env(tmp_path / "team", GOOD)
    envs.lock_env(ws, catalog, env, UNSIGNED, chosen_sources=OFFLINE)

    fake = FakeEngine()
    ready, built = envs.build_env(ws, catalog, env, NoLines(), UNSIGNED, chosen_sources=OFFLINE, connect=connect_to(fake))
    assert built.status == "built" and ready.spec.packages == planned.packages
    request = fake.builds[-1]
    assert request.tag == "builder-env/vision:latest" and request.labels["io.builder.content-hash"] == ready.context.content_hash
    _, again = envs.build_env(ws, catalog, env, NoLines(), UNSIGNED, chosen_sources=OFFLINE, connect=connect_to(fake))
    assert again.status == "up-to-date" and len(fake.builds) == 1

    checks = Checks(fake)
    monkeypatch.setattr(subprocess, "run", checks)
    _, tested = envs.test_env(ws, catalog, env, UNSIGNED, connect=connect_to(fake))
    assert (tested.same, tested.smoke.verdict, checks.seen) == (True, "passed", ["env-vision"])
    checks.broken["env-vision"] = Probe("numba", "numba refuses NumPy 2.5")
    _, tested = envs.test_env(ws, catalog, env, UNSIGNED, connect=connect_to(fake))
    assert (tested.same, tested.smoke.verdict) == (False, "failed") and "but the base was passed" in tested.note
    fake.blocked_checks = "no `docker` is on PATH"  # the checks' transport: refused, not a verdict
    with pytest.raises(UserError, match="docker"):
        envs.test_env(ws, catalog, env, UNSIGNED, connect=connect_to(fake))
    assert checks.seen == ["env-vision", "env-vision"]
