"""A small in-memory Docker engine and registry for the publish and pull tests: names that point at
image ids, a push that sends whatever a name points at when the engine reads it, a registry of
tag -> digest, and hooks to plant what a hostile user or a broken registry does mid-run."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from docker.errors import NotFound  # type: ignore[import-untyped]


def digest_of(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


@dataclass
class FakeResponse:
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.closed.set()


class FakeContainer:
    def __init__(self, engine: FakeEngine, kwargs: dict[str, Any]) -> None:
        self.id = f"c{len(engine.created)}"
        self.kwargs = kwargs
        self.engine = engine

    def start(self) -> None: ...

    def wait(self, timeout: int) -> dict[str, int]:
        return {"StatusCode": self.engine.manifest_status}

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        image = self.engine.resolve(self.kwargs["image"])
        return f"## pip freeze\nbuilt-from=={image}\n## dpkg\npython3.11 3.11.2\n## environment\nPATH=/opt/venv/bin\nSECRET=x\n".encode()


class FakeContainers:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def create(self, **kwargs: Any) -> FakeContainer:
        container = FakeContainer(self.engine, kwargs)
        self.engine.created.append(container)
        return container


class FakeApi:
    def __init__(self, engine: FakeEngine) -> None:
        self.e = engine
        self.hooks: dict[str, list[Callable[..., Any]]] = {"response": []}

    # images and names
    def inspect_image(self, ref: str) -> dict[str, Any]:
        image = self.e.resolve(ref)
        return {"Id": image, "Size": 5_000_000, "RepoDigests": list(self.e.repo_digests.get(image, [])), "Config": {"Labels": {}}}

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.e.names[f"{repository}:{tag}"] = self.e.resolve(image)

    def remove_image(self, ref: str) -> None:
        if ref not in self.e.names:
            raise NotFound(ref)
        image = self.e.names.pop(ref)
        if image not in self.e.names.values():
            self.e.images.discard(image)  # like the engine: its last name gone, an unused image goes too

    # the registry
    def push(self, repository: str, tag: str, stream: bool, decode: bool) -> Iterator[dict[str, Any]]:
        name = f"{repository}:{tag}"
        self.e.pushes.append(name)
        response = FakeResponse()
        self.e.responses.append(response)
        for hook in list(self.hooks["response"]):
            hook(response)
        return self.e.push_stream(name, repository, tag, response)

    def inspect_distribution(self, ref: str) -> dict[str, Any]:
        if ref not in self.e.registry:
            raise NotFound(f"manifest unknown: {ref}")
        return {"Descriptor": {"digest": self.e.registry[ref]}}

    def pull(self, reference: str, stream: bool, decode: bool) -> Iterator[dict[str, Any]]:
        self.e.pulls.append(reference)
        if self.e.pull_fault is not None:
            raise self.e.pull_fault
        repository, _, digest = reference.partition("@")
        image = f"sha256:pulled-{digest[-8:]}"
        self.e.images.add(image)
        self.e.repo_digests.setdefault(image, []).append(reference)
        self.e.by_digest[reference] = image
        yield {"status": f"Digest: {digest}"}

    # containers
    def containers(self, all: bool, filters: dict[str, str], quiet: bool = False) -> list[dict[str, Any]]:  # noqa: A002 - the SDK's name
        return list(self.e.leftovers)

    def remove_container(self, container_id: str, force: bool, v: bool) -> None:
        self.e.removed.append(container_id)


class FakeEngine:
    """`before_push(name)` runs when the engine starts a push (a concurrent `docker tag` goes here);
    `fail_push(name)` returns an error message for the push's stream, or None."""

    def __init__(self) -> None:
        self.images: set[str] = set()
        self.names: dict[str, str] = {}
        self.repo_digests: dict[str, list[str]] = {}
        self.registry: dict[str, str] = {}
        self.by_digest: dict[str, str] = {}
        self.pushes: list[str] = []
        self.pulls: list[str] = []
        self.responses: list[FakeResponse] = []
        self.created: list[FakeContainer] = []
        self.leftovers: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self.before_push: Callable[[str], None] = lambda name: None
        self.fail_push: Callable[[str], str | None] = lambda name: None
        self.stall = False
        self.manifest_status = 0  # the exit code of a manifest container
        self.pull_fault: Exception | None = None
        self.api = FakeApi(self)
        self.containers = FakeContainers(self)

    def resolve(self, ref: str) -> str:
        if ref in self.images:
            return ref
        if ref in self.names:
            return self.names[ref]
        if ref in self.by_digest:
            return self.by_digest[ref]
        raise NotFound(f"No such image: {ref}")

    def push_stream(self, name: str, repository: str, tag: str, response: FakeResponse) -> Iterator[dict[str, Any]]:
        yield {"status": f"The push refers to repository [{repository}]"}
        self.before_push(name)
        if self.stall:
            response.closed.wait(30)  # a registry that stops reading: silence until the client goes
            raise ConnectionError("Connection aborted.")
        message = self.fail_push(name)
        if message:
            yield {"error": message}
            return
        image = self.resolve(name)  # what the name points at when the engine reads it
        digest = digest_of(image)
        self.registry[name] = digest
        entry = f"{repository}@{digest}"
        if entry not in self.repo_digests.setdefault(image, []):
            self.repo_digests[image].append(entry)
        yield {"status": f"{tag}: digest: {digest} size: 1234"}
        yield {"aux": {"Tag": tag, "Digest": digest, "Size": 1234}}

    def version(self) -> dict[str, str]:
        return {"Version": "20.10.24"}

    def info(self) -> dict[str, Any]:
        return {"Runtimes": {"runc": {}}}

    def close(self) -> None: ...
