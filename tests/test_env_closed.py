"""Team environments that never fail open (issue 37, items 3, 4, 5 and the env parts of 8, 9, 11),
offline: the env commands check the base's evidence as `pull` does; the env lock names the record
and digest it was made on, and a catalog whose record no longer has that digest makes it stale
(never built FROM); `env shell` replaces only its own devcontainer.json and writes through no link
out of the project; one lock per env file; the workdir checked in linear time and kept off the
image's own folders; the lock's refusals say what is wrong and the fix. uv is replaced by what it
prints (tests/test_env.py's fixtures); the real resolution is tests/integration/test_team_env.py's."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.catalog.store import Catalog
from builder.engine import settings as build_settings
from builder.engine.staging import pip_conf
from builder.env import lock as envlock
from builder.env import shell
from builder.env.envfile import load
from builder.lock import files
from builder.lock.resolve import LockFailed
from builder.model.sources import Sources
from builder.publish import attestation, evidence, signing
from builder.publish.signing import Unverified
from builder.publish.verify import signers
from builder.usecases import env as envs
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import smoke
from tests.fake_engine import FakeEngine, connect_to
from tests.test_env import DIGEST, GOOD, IMAGE, UNSIGNED, NoLines, h, team, uv_output, write_env
from tests.test_evidence import make_key, needs_ssh_keygen

__all__ = ["team"]  # the fixture, shared with tests/test_env.py

SWAPPED = "127.0.0.1:5000/gpu-images@sha256:" + "9" * 64


def locked(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch, body: str = GOOD) -> Any:
    ws, catalog, folder = team
    env = write_env(folder, body)
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: uv_output())
    envs.lock_env(ws, catalog, env, UNSIGNED)
    return env


def swap_digest(catalog: Catalog, image: str, digest: str) -> None:
    """Edit the catalog's record of `image` to name another digest (a hand, or an attacker)."""
    (old,) = [r for r in catalog.load() if r.id == image]
    catalog.add([replace(old, digest=digest)], {})


# -- item 3: the base's digest and record in the lock, its evidence checked ----------------------------------


def test_the_env_lock_names_the_record_and_digest_it_was_made_on(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = locked(team, monkeypatch)
    text = env.lock_path.read_text()
    assert text.splitlines()[1] == (
        f"# on {IMAGE} ({DIGEST}): `builder env lock` re-resolves it on that image's lock; `builder env lock --check` verifies it."
    )
    assert files.read(text, "x").base == (IMAGE, DIGEST)


def test_a_record_whose_digest_changed_makes_the_lock_stale_and_is_never_built_from(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, _ = team
    env = locked(team, monkeypatch)
    swap_digest(catalog, IMAGE, SWAPPED)
    with pytest.raises(UserError) as caught:
        envs.locked_base(ws, catalog, env)
    assert caught.value.message == (
        f"is stale: it was locked on {IMAGE} as {DIGEST}, but the catalog's record now names {SWAPPED}; "
        "if that change is yours run `builder env lock`, else restore the catalog from git"
    )
    fake = FakeEngine()
    with pytest.raises(UserError, match="is stale: it was locked on"):
        envs.build_env(ws, catalog, env, NoLines(), UNSIGNED, connect=connect_to(fake))
    assert fake.builds == [], "nothing is built FROM the swapped digest"
    done = envs.lock_env(ws, catalog, env, UNSIGNED)  # the person who made the change re-locks, and sees the move
    assert (done.status, done.digest, done.moved_from) == ("locked", SWAPPED, DIGEST)
    assert envs.locked_base(ws, catalog, env)[0].record.digest == SWAPPED


def test_env_lock_check_is_stale_exit_1_when_the_records_digest_changed(
    cli: Any, team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    args = ("--matrix", str(ws.matrix_path), "env", "lock", "--check", "--file", str(env.path), "--catalog", str(catalog.root))
    result = cli(*args)
    assert result.exit_code == 0 and result.stdout.startswith(f"current: gpu-env.lock on {IMAGE} ({DIGEST}); not verified"), result.output
    swap_digest(catalog, IMAGE, SWAPPED)
    result = cli(*args)
    assert result.exit_code == 1 and result.stderr.startswith("stale: ") and f"now names {SWAPPED}" in result.stderr, result.output


def sign_catalog(catalog: Catalog, key: Path) -> None:
    """Evidence for every record as publish writes it, signed with `key`."""
    out: dict[str, str | None] = {}
    for record in catalog.load():
        sbom = '{"bomFormat": "CycloneDX"}\n'
        statement = attestation.statement(record, smoke(record.id), sbom)
        signed = evidence.signed_fields(record)
        out[evidence.sbom_name(record.id)] = sbom
        out[evidence.statement_name(record.id)] = statement
        out[evidence.record_name(record.id)] = signed
        out[evidence.statement_name(record.id) + evidence.SIG] = signing.sign(statement.encode(), key, signing.ATTESTATION_NAMESPACE)
        out[evidence.record_name(record.id) + evidence.SIG] = signing.sign(signed.encode(), key, signing.RECORD_NAMESPACE)
    catalog.add([], {}, out)


@pytest.fixture
def signed_team(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[Workspace, Catalog, Path, str]:
    """`team` with its records' evidence signed by ci@example.org; the allowed_signers line (not written)."""
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    key, line = make_key(tmp_path, "ci@example.org")
    sign_catalog(team[1], key)
    return (*team, line)


@needs_ssh_keygen
def test_the_env_commands_check_the_bases_evidence_as_pull_does(
    signed_team: tuple[Workspace, Catalog, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder, line = signed_team
    env = write_env(folder, GOOD)
    asked: list[object] = []
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: asked.append(a) or uv_output())  # type: ignore[func-returns-value]
    with pytest.raises(UserError, match="records are signed; give --allowed-signers or --no-verify"):
        signers(catalog, None, True)  # what every env command resolves first (cli.py's _signers)
    (catalog.root / signing.ALLOWED_SIGNERS).write_text(line)
    chosen = signers(catalog, None, True)
    done = envs.lock_env(ws, catalog, env, chosen)
    assert done.trust == "signatures verified (signed by ci@example.org)"
    assert envs.prepare(ws, catalog, env, chosen).trust == done.trust
    record = catalog.file.read_text()
    catalog.file.write_text(record.replace('"verdict": "passed"', '"verdict": "gpu-skipped"', 1))  # a plausible edit
    env.lock_path.unlink()
    with pytest.raises(Unverified, match="it was changed after it was signed"):
        envs.lock_env(ws, catalog, env, chosen)
    assert len(asked) == 1 and not env.lock_path.exists(), "refused before uv ran, nothing written"
    catalog.file.write_text(record)
    envs.lock_env(ws, catalog, env, chosen)
    catalog.file.write_text(record.replace('"verdict": "passed"', '"verdict": "gpu-skipped"', 1))
    fake = FakeEngine()
    for step in (
        lambda: envs.build_env(ws, catalog, env, NoLines(), chosen, connect=connect_to(fake)),
        lambda: envs.test_env(ws, catalog, env, chosen, connect=connect_to(fake)),
        lambda: envs.plan_shell(ws, catalog, env, folder, 1000, 1000, chosen),
    ):
        with pytest.raises(Unverified, match="it was changed after it was signed"):
            step()
    assert fake.builds == [] and not (folder / ".devcontainer").exists()
    not_checked = signers(catalog, None, False)
    assert envs.prepare(ws, catalog, env, not_checked).trust == "not verified (--no-verify)"


@needs_ssh_keygen
def test_env_build_refuses_a_signed_catalog_without_signers_on_the_command_line(
    cli: Any, signed_team: tuple[Workspace, Catalog, Path, str]
) -> None:
    ws, catalog, folder, _ = signed_team
    env = write_env(folder, GOOD)
    for command in ("lock", "build", "test", "shell"):
        result = cli("--matrix", str(ws.matrix_path), "env", command, "--file", str(env.path), "--catalog", str(catalog.root))
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and "records are signed; give --allowed-signers or --no-verify" in lines[0], (
            command,
            result.output,
        )


# -- item 5: one lock per env file ---------------------------------------------------------------------


def test_each_env_file_gets_its_own_lock_image_and_devcontainer(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch, GOOD.replace("name: vision\n", ""))
    first = env.lock_path.read_bytes()
    (folder / "other-env.yaml").write_text("base: numba=0.68.0\nrequirements: [six==1.17.0]\n")
    other = load(folder / "other-env.yaml")
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: f"six==1.17.0 \\\n    --hash=sha256:{h('6')}\n    # via -r requirements.in\n")
    envs.lock_env(ws, catalog, other, UNSIGNED)
    assert other.lock_path == folder / "other-env.lock" and other.lock_path.is_file()
    assert env.lock_path.read_bytes() == first, "gpu-env.lock of the env beside it is untouched"
    assert (env.name, other.name) == ("team", "team-other-env") and env.tag != other.tag
    assert env.devcontainer == folder / ".devcontainer" / "devcontainer.json"
    assert other.devcontainer == folder / ".devcontainer" / "other-env" / "devcontainer.json"
    assert envs.locked_base(ws, catalog, other)[1].text == other.lock_path.read_text()
    assert envs.locked_base(ws, catalog, env)[1].text == first.decode()
    (folder / "x.lock").write_text("base: numba=0.68.0\n")
    assert load(folder / "x.lock").lock_path == folder / "x.lock.lock", "an env file is never its own lock"


def test_a_lock_of_another_environment_names_the_env_command(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    other = write_env(folder, GOOD.replace("name: vision", "name: other"))
    base = envs.base_lock(ws, catalog, catalog.load()[0])
    with pytest.raises(UserError) as caught:
        files.verify(files.load(env.lock_path.read_text(), "x"), envlock.target(other, base.lock), "x", files.ENV_TOOL)
    assert "run `builder env lock` beside its env file" in caught.value.message and "--select id=env-" not in caught.value.message


# -- item 4: env shell writes only what it made ------------------------------------------------------------


def test_shell_replaces_only_its_own_devcontainer(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    plan = envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)
    assert shell.MARKER in plan.devcontainer.read_text()
    envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)  # its own file: replaced
    mine = '{"image": "my-own", "runArgs": ["--shm-size=8g"]}\n'
    plan.devcontainer.write_text(mine)
    with pytest.raises(UserError) as caught:
        envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)
    assert str(caught.value).startswith(f"{plan.devcontainer}: was not written by builder") and "move it away" in str(caught.value)
    assert plan.devcontainer.read_text() == mine, "a hand-written file is left as it is"


@pytest.mark.parametrize("where", ["outside", "catalog", "inside"])
def test_a_linked_devcontainer_folder_is_written_only_inside_the_project(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    target = {"outside": tmp_path / "elsewhere", "catalog": catalog.root, "inside": folder / "config"}[where]
    target.mkdir(exist_ok=True)
    (folder / ".devcontainer").symlink_to(target)
    if where == "inside":
        envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)
        assert shell.MARKER in (target / "devcontainer.json").read_text()
        return
    with pytest.raises(UserError) as caught:
        envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)
    assert str(caught.value).startswith(f"{folder / '.devcontainer'}: is a link to {target.resolve()}") and "\n" not in str(caught.value)
    assert not (target / "devcontainer.json").exists()


def test_a_devcontainer_that_is_a_file_or_a_link_is_one_line(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    (folder / ".devcontainer").write_text("not a folder")
    with pytest.raises(
        UserError, match=r"\.devcontainer: is not a folder; `builder env shell` writes \.devcontainer/devcontainer\.json: move it away"
    ):
        envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)
    (folder / ".devcontainer").unlink()
    (folder / ".devcontainer").mkdir()
    (folder / ".devcontainer" / "devcontainer.json").symlink_to(catalog.file)
    with pytest.raises(UserError, match="is a symbolic link; refusing to replace it"):
        envs.plan_shell(ws, catalog, env, folder, 1000, 1000, UNSIGNED)
    assert '"images"' in catalog.file.read_text(), "the link's target is untouched"


def test_a_project_path_docker_cannot_mount_is_refused_before_anything(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    project = tmp_path / 'my "quoted" project'
    project.mkdir()
    with pytest.raises(UserError, match=r"has a comma, a double quote or a control character, which `docker run --mount` cannot take"):
        envs.plan_shell(ws, catalog, env, project, 1000, 1000, UNSIGNED)
    assert not (folder / ".devcontainer").exists(), "nothing written"


def test_shell_on_the_command_line_leaves_a_hand_written_devcontainer(
    cli: Any, team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    (folder / ".devcontainer").mkdir()
    (folder / ".devcontainer" / "devcontainer.json").write_text("{}\n")
    monkeypatch.chdir(folder)
    result = cli("--matrix", str(ws.matrix_path), "env", "shell", "--print", "--file", str(env.path), "--catalog", str(catalog.root))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "was not written by builder" in lines[0], result.output
    assert (folder / ".devcontainer" / "devcontainer.json").read_text() == "{}\n"


# -- items 8 and 9: the workdir ----------------------------------------------------------------------------


@pytest.mark.timeout(20)
@pytest.mark.parametrize("workdir", ["/" + "a" * 60 + "!", "/" + "a/" * 3000 + "!", "/" + "x" * 300])
def test_a_long_or_crafted_workdir_is_refused_at_once(tmp_path: Path, workdir: str) -> None:
    """The old pattern took exponential time to refuse 40 characters: every env command stalled."""
    with pytest.raises(UserError, match="workdir: .* must be an absolute folder like /workspace"):
        write_env(tmp_path, f"base: numba=0.68\nworkdir: '{workdir}'\n")


@pytest.mark.parametrize(
    "workdir", ["/etc", "/opt/venv", "/opt", "/opt/venv/lib", "/usr/local/src", "/home/app", "/home", "/tmp", "/proc/x", "/"]
)
def test_a_workdir_over_the_images_own_folders_is_refused(tmp_path: Path, workdir: str) -> None:
    with pytest.raises(UserError) as caught:
        write_env(tmp_path, f"base: numba=0.68\nworkdir: {workdir}\n")
    assert caught.value.line == 2 and "\n" not in str(caught.value)
    assert "would mount the project over the image's" in caught.value.message or "must be an absolute folder" in caught.value.message


@pytest.mark.parametrize("workdir", ["/workspace", "/opt/project", "/srv/team", "/mnt/data/", "/home/alice", "/work.d/x_y-z"])
def test_a_workdir_of_its_own_is_taken(tmp_path: Path, workdir: str) -> None:
    assert write_env(tmp_path, f"base: numba=0.68\nworkdir: {workdir}\n").workdir == workdir.rstrip("/")


# -- item 11: what env lock says ---------------------------------------------------------------------------


def test_a_package_no_index_has_is_named_as_such(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, catalog, folder = team
    env = write_env(folder, "base: numba=0.68.0\nrequirements:\n  - six\n  - no-such-package-xyz==1.0\n")
    reason = (
        "Because no-such-package-xyz was not found in the package registry and you require no-such-package-xyz==1.0, "
        "we can conclude that your requirements are unsatisfiable."
    )
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: (_ for _ in ()).throw(LockFailed("unresolvable", reason)))
    with pytest.raises(UserError) as caught:
        envs.lock_env(ws, catalog, env, UNSIGNED)
    assert caught.value.line == 4 and "the base pins" not in caught.value.message
    assert caught.value.message.startswith("refused: no-such-package-xyz is on no package index this lock reads")
    assert "--index-url" in caught.value.message


def test_an_unresolvable_requirement_that_moves_nothing_of_the_base_says_uvs_reason(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, catalog, folder = team
    env = write_env(folder, "base: numba=0.68.0\nrequirements:\n  - six>99\n")
    reason = "Because only six<=1.17.0 is available and you require six>99, we can conclude that your requirements are unsatisfiable."
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: (_ for _ in ()).throw(LockFailed("unresolvable", reason)))
    with pytest.raises(UserError) as caught:
        envs.lock_env(ws, catalog, env, UNSIGNED)
    assert caught.value.message == f"refused: uv cannot resolve the requirements on {IMAGE}: {reason}; change the requirement it names"
    assert caught.value.line == 3


@pytest.mark.parametrize(
    ("body", "resolved", "words", "line"),
    [
        ("base: numba=0.68.0\nrequirements: []\n", None, "requirements: is empty: an environment adds packages to its base", 2),
        ("base: numba=0.68.0\n", None, "requirements: is empty", 1),
        ("base: numba=0.68.0\nrequirements:\n  - six; python_version < '3'\n", "", "requirements: none of them applies to python 3.11", 2),
    ],
)
def test_nothing_to_lock_says_why_not_that_a_lock_is_corrupt(
    team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch, body: str, resolved: str | None, words: str, line: int
) -> None:
    ws, catalog, folder = team
    env = write_env(folder, body)
    asked: list[object] = []
    monkeypatch.setattr(envs, "resolve", lambda *a, **k: asked.append(a) or resolved)  # type: ignore[func-returns-value]
    with pytest.raises(UserError) as caught:
        envs.lock_env(ws, catalog, env, UNSIGNED)
    assert caught.value.message.startswith(words) and caught.value.line == line, caught.value
    assert "restore it from git" not in caught.value.message and not env.lock_path.exists()
    assert len(asked) == (0 if resolved is None else 1), "an empty list is refused before uv runs"


def test_a_file_index_named_on_the_command_line_is_served_not_passed_in(tmp_path: Path) -> None:
    """docs/commands.md (build): file:// indexes are never copied; their wheels are served from 127.0.0.1 (build and env build alike)."""
    index, extra = tmp_path / "mirror", tmp_path / "more wheels"
    index.mkdir()
    extra.mkdir()
    chosen = Sources(index_url=index.as_uri(), extra_index_urls=(extra.as_uri(), "https://a.corp/simple"), use_host=False)
    settings = build_settings.for_sources(os.environ, chosen, None)
    assert settings.pip.index_url is None and settings.pip.extra_index_urls == ("https://a.corp/simple",)
    assert settings.pip.local_dirs == (index, extra)
    assert "file:" not in pip_conf(settings, settings.pip.extra_index_urls), "the build's pip.conf names no host path"
    with pytest.raises(UserError, match=r"^--index-url file://.*/missing: no such folder"):
        build_settings.for_sources(os.environ, Sources(index_url=(tmp_path / "missing").as_uri(), use_host=False), None)


def test_an_images_folder_that_is_a_file_says_to_move_it(cli: Any, tmp_path: Path, small_matrix: str) -> None:
    (tmp_path / "matrix.yaml").write_text(small_matrix)
    (tmp_path / "images").write_text("not a folder")
    result = cli("--matrix", str(tmp_path / "matrix.yaml"), "render", "--check")
    assert (
        result.exit_code == 2 and "is a file, not a folder, so the rendered images cannot go there; move it out of the way" in result.output
    )
    assert "leave it out" not in result.output


def test_an_env_lock_of_the_old_form_is_stale_and_relocks(team: tuple[Workspace, Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock in the old form (no base record): read as stale, re-locked on the record its pins name."""
    ws, catalog, folder = team
    env = locked(team, monkeypatch)
    text = env.lock_path.read_text().split("\n")
    text[1] = "# `builder env lock` re-resolves it on its base image's lock; `builder env lock --check` verifies it."
    env.lock_path.write_text("\n".join(text))
    with pytest.raises(UserError, match="was written before environment locks named their base record; run `builder env lock`"):
        envs.locked_base(ws, catalog, env)
    assert envs.lock_env(ws, catalog, env, UNSIGNED).status == "locked"
    assert files.read(env.lock_path.read_text(), "x").base == (IMAGE, DIGEST)
