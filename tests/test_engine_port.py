"""The engine port's boundary: only the docker adapter (builder/engine/client.py) imports the docker
SDK, no engine client crosses a module boundary untyped, and both implementations of the port (the
adapter and tests/fake_engine.py) agree on what the records mean where it can be checked offline."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from builder.engine import client
from builder.engine.port import ContainerSpec, EngineFault, NotFound, Progress
from builder.engine.session import OWNER_LABEL, SESSION_ID, SESSION_LABEL, owner_labels
from tests.fake_engine import FakeEngine

BUILDER = Path(__file__).resolve().parents[1] / "builder"
ADAPTER = BUILDER / "engine" / "client.py"
CHECKS = BUILDER / "smoke" / "checks"  # run by pytest in their own process, against a container (not a use-case)


def _imports_docker(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "docker" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "docker" and not node.level:
            return True
    return False


def test_only_the_adapter_imports_docker() -> None:
    found = sorted(str(p.relative_to(BUILDER)) for p in BUILDER.rglob("*.py") if CHECKS not in p.parents and _imports_docker(p))
    assert found == ["engine/client.py"]


def test_no_untyped_client_in_a_signature() -> None:
    pattern = re.compile(r"\b(client|engine)\s*:\s*Any\b|\bClient\s*=\s*Any\b")
    offenders = [
        f"{p.relative_to(BUILDER)}:{n}"
        for p in BUILDER.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_the_adapter_turns_a_container_spec_into_locked_down_sdk_arguments() -> None:
    spec = ContainerSpec(image="x", command=("true",), labels={"a": "b"}, gpus=True, group_add=("44",))
    kwargs = client.create_kwargs(spec)
    assert kwargs["network_disabled"] is True and kwargs["cap_drop"] == ["ALL"] and kwargs["read_only"] is True
    assert kwargs["security_opt"] == ["no-new-privileges"] and kwargs["command"] == ["true"] and kwargs["group_add"] == ["44"]
    assert "mem_limit" not in kwargs and len(kwargs["device_requests"]) == 1


def test_the_adapter_reads_the_engines_stream_chunks_as_progress() -> None:
    assert client._progress({"stream": "Step 1/2\n"}) == Progress(text="Step 1/2\n")
    assert client._progress({"status": "Pushing", "id": "abc"}) == Progress(text="Pushing", layer="abc")
    assert client._progress({"error": "denied:\n  no"}) == Progress(error="denied: no")
    assert client._progress({"aux": {"Tag": "x", "Digest": "sha256:1", "Size": 3}}) == Progress(digest="sha256:1")


def test_the_adapter_translates_dockers_errors_into_the_ports() -> None:
    from docker.errors import APIError, DockerException
    from docker.errors import NotFound as DockerNotFound

    cases = [
        (DockerNotFound("No such image: x"), NotFound, 404),
        (APIError("500 Server Error: https://u:pw@registry/v2", response=None), EngineFault, None),
        (DockerException("Error while fetching server API version"), EngineFault, None),
        (ConnectionError("Connection aborted."), EngineFault, None),
    ]
    for raised, expected, status in cases:
        try:
            with client._faults():
                raise raised
        except EngineFault as exc:
            assert type(exc) is expected and exc.status == status and "\n" not in exc.message and "pw@" not in exc.message
        else:
            raise AssertionError(f"{raised!r} was not translated")


def test_containers_carry_the_owner_and_this_runs_session_in_both_implementations() -> None:
    assert owner_labels({"a": "b"}) == {"a": "b", OWNER_LABEL: "builder", SESSION_LABEL: SESSION_ID}
    fake = FakeEngine()
    fake.add_image("sha256:i", "x")
    with fake.container(ContainerSpec(image="x", command=("true",), labels={"a": "b"})) as container:
        assert container.labels == owner_labels({"a": "b"}) and fake.owned_containers()[0].id == container.id
    assert fake.owned_containers() == []


def test_listing_owned_containers_survives_one_removed_meanwhile() -> None:
    """CI failed once on this race: the SDK's `containers.list` inspects each listed container again,
    and a container that another process removed in between raised NotFound out of the listing."""
    from docker.errors import NotFound as DockerNotFound
    from docker.models.containers import ContainerCollection

    class Api:
        def containers(self, all: bool, filters: dict[str, str], **_: object) -> list[dict[str, object]]:
            assert all and filters == {"label": f"{OWNER_LABEL}=builder"}
            return [{"Id": "gone", "Labels": {OWNER_LABEL: "builder"}}, {"Id": "kept", "Labels": None}]

        def inspect_container(self, container_id: str) -> None:
            raise DockerNotFound(f"No such container: {container_id}")

    class Sdk:  # a DockerClient whose engine removed one container between the listing and its inspection
        api = Api()

        def __init__(self) -> None:
            self.containers = ContainerCollection(client=self)  # type: ignore[arg-type]  # the SDK's own list-then-inspect

    with pytest.raises(DockerNotFound):  # the race, as the SDK's containers.list meets it
        Sdk().containers.list(all=True, filters={"label": f"{OWNER_LABEL}=builder"})
    entries = client.owned_containers(Sdk())  # type: ignore[arg-type]  # stands in for a DockerClient
    assert [(e.id, dict(e.labels)) for e in entries] == [("gone", {OWNER_LABEL: "builder"}), ("kept", {})]


def test_the_retry_helper_retries_flakes_only_and_reports_redacted() -> None:
    from builder.engine.retry import GaveUp, retry_network

    told: list[tuple[int, str]] = []

    def flaky(attempt: int) -> int:
        if attempt < 3:
            raise ConnectionError("reset by https://me:pw@index.example/simple")
        return attempt

    assert (
        retry_network(
            flaky, flake=lambda e: isinstance(e, ConnectionError), attempts=3, wait_s=0.0, on_retry=lambda n, r: told.append((n, r))
        )
        == 3
    )
    assert [n for n, _ in told] == [2, 3] and all("pw@" not in r and "****@index.example" in r for _, r in told)
    with pytest.raises(GaveUp) as gave_up:
        retry_network(flaky, flake=lambda e: isinstance(e, ConnectionError), attempts=2, wait_s=0.0)
    assert gave_up.value.attempts == 2 and "pw@" not in gave_up.value.reason and isinstance(gave_up.value.last, ConnectionError)
    with pytest.raises(ConnectionError):  # not a flake: at once, as it is
        retry_network(flaky, flake=lambda e: False, attempts=5, wait_s=0.0)
    with pytest.raises(GaveUp) as gave_up:
        retry_network(flaky, flake=lambda e: True, attempts=5, wait_s=10.0, time_left=lambda: 5.0)
    assert gave_up.value.attempts == 1, "a wait past the deadline is not started"


class _Refusing:
    """A docker SDK client whose engine answers each removal with the next of `answers` (an
    exception to raise, or None: removed)."""

    def __init__(self, answers: list[Exception | None]) -> None:
        self.answers = answers
        self.calls = 0
        self.api = self

    def remove_container(self, container_id: str, force: bool, v: bool) -> None:
        assert force and v
        self.calls += 1
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer


def _conflict() -> Exception:
    from docker.errors import APIError

    class Response:
        status_code = 409
        reason = "Conflict"
        url = "http+docker://localhost/v1.41/containers/c1"

    return APIError("removal of container c1 is already in progress", response=Response())  # type: ignore[arg-type]


def test_a_removal_answered_409_is_asked_again_until_the_container_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 409 (its removal under way, or its start not yet done: a Ctrl-C that lands mid-start) is no
    proof it is gone: removal is asked again until the engine removes it or answers 404, and only then
    is the id forgotten; a 409 to the last try raises and leaves the id to cleanup_all."""
    from docker.errors import NotFound as SdkNotFound

    monkeypatch.setattr(client, "_live", {})
    for answers, calls in (([_conflict(), _conflict(), None], 3), ([_conflict(), SdkNotFound("gone")], 2)):
        sdk = _Refusing(list(answers))
        client._live["c1"] = sdk  # type: ignore[assignment]
        client._remove(sdk, "c1", tries=5, wait_s=0)  # type: ignore[arg-type]
        assert sdk.calls == calls and "c1" not in client._live
    sdk = _Refusing([_conflict() for _ in range(3)])
    client._live["c1"] = sdk  # type: ignore[assignment]
    with pytest.raises(Exception, match="409 Client Error"):
        client._remove(sdk, "c1", tries=3, wait_s=0)  # type: ignore[arg-type]
    assert sdk.calls == 3 and "c1" in client._live, "still registered: cleanup_all tries again at exit"
