"""Which engine `builder` talks to, and how it says so: DOCKER_HOST, else the docker CLI's current
context (Docker Desktop on Linux sets one), else the default socket, resolved in the order the SDK
and the docker CLI use. No engine: each case points at a socket nothing listens on, or at none."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from builder.engine import client as engine
from builder.util.errors import UserError

DEAD = "unix:///nonexistent/builder-test/docker.sock"


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty docker config folder of the test's own: no DOCKER_HOST, no DOCKER_CONTEXT."""
    folder = tmp_path / "docker-config"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    return folder


def add_context(config: Path, name: str, host: str) -> None:
    """A context as `docker context create NAME --docker host=HOST` writes it."""
    meta = config / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": False}
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}), encoding="utf-8")


def use(config: Path, name: str) -> None:
    (config / "config.json").write_text(json.dumps({"currentContext": name}), encoding="utf-8")


def test_docker_host_first_then_the_default_socket(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine.engine_address() == f"{engine.DEFAULT_SOCKET} (DOCKER_HOST is not set)"
    add_context(docker_config, "desktop-linux", DEAD)
    use(docker_config, "desktop-linux")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    assert engine.engine_address() == "tcp://127.0.0.1:1", "DOCKER_HOST wins over any context, as in the docker CLI"


def test_the_current_context_is_named_and_used(docker_config: Path) -> None:
    add_context(docker_config, "desktop-linux", DEAD)
    use(docker_config, "desktop-linux")
    assert engine.engine_address() == f"{DEAD} (the docker context 'desktop-linux'; DOCKER_HOST is not set)"
    with pytest.raises(UserError) as info:
        engine.connect(timeout=5)
    message = str(info.value)
    assert message.startswith(f"no Docker engine answers at {DEAD} (the docker context 'desktop-linux'"), message
    assert "/var/run/docker.sock" not in message, "the socket the SDK did not try is not named"


def test_docker_context_beats_the_configs_current_context(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_context(docker_config, "other", "unix:///nonexistent/other.sock")
    use(docker_config, "gone")
    monkeypatch.setenv("DOCKER_CONTEXT", "other")
    assert engine.engine_address().startswith("unix:///nonexistent/other.sock (the docker context 'other'")
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert engine.engine_address() == f"{engine.DEFAULT_SOCKET} (DOCKER_HOST is not set)"


@pytest.mark.parametrize("where", ["env", "config"])
def test_a_context_that_does_not_exist_is_one_line_not_the_default_socket(
    docker_config: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The SDK quietly falls back to the default socket here (another engine than the user named)."""
    if where == "env":
        monkeypatch.setenv("DOCKER_CONTEXT", "typo")
    else:
        use(docker_config, "typo")
    with pytest.raises(UserError) as info:
        engine.connect(timeout=5)
    message = str(info.value)
    named_by = "DOCKER_CONTEXT" if where == "env" else f"currentContext in {docker_config / 'config.json'}"
    assert message.startswith(f"the docker context 'typo' ({named_by}) does not exist"), message
    assert "docker context ls" in message and "\n" not in message


def test_an_unreadable_context_is_one_line(docker_config: Path) -> None:
    add_context(docker_config, "broken", DEAD)
    (next((docker_config / "contexts" / "meta").iterdir()) / "meta.json").write_text("{not json", encoding="utf-8")
    use(docker_config, "broken")
    with pytest.raises(
        UserError, match=r"^the docker context 'broken' \(currentContext in .*\) cannot be read: .*; fix it or set DOCKER_HOST$"
    ):
        engine.engine_address()


def test_the_suites_first_lane_is_the_engine_builder_resolves(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py: lane 2 checks its engine against lane 1's, which is the one `builder` talks
    to (a developer's docker context included), not always the default socket."""
    from tests.conftest import first_engine

    assert first_engine() == engine.DEFAULT_SOCKET
    add_context(docker_config, "desktop-linux", DEAD)
    use(docker_config, "desktop-linux")
    assert engine.engine_endpoint() == (DEAD, "the docker context 'desktop-linux'; DOCKER_HOST is not set")
    assert first_engine() == DEAD
    use(docker_config, "gone")  # refused by `builder`: the fixture says so; here the default socket stands in
    assert first_engine() == engine.DEFAULT_SOCKET
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    assert first_engine() == "tcp://127.0.0.1:1"
