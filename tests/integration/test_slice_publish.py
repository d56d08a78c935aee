"""Known-good delivery with real parts: the CPU slice (built and smoke-tested for real) published to
the local registry on 127.0.0.1:5000 (.ci/docker-up.sh), pulled back by query and digest, the
catalog's digests checked against the registry's own HTTP API; refusals, a registry that is down,
two publishers at once. Each run pushes to its own repository and writes a catalog in a temp dir.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.engine import client as engine
from builder.model import results as stored
from builder.model.plan import ImageSpec
from builder.publish import sbom
from builder.workspace import Workspace

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000"
NAME = f"builder-test/publish-{uuid.uuid4().hex[:8]}"
REPOSITORY = f"{REGISTRY}/{NAME}"
SIGNER = "publish-test@example.org"
WS = Workspace.locate(str(ROOT / "matrix.yaml"))
SLICE = WS.selected(None, use_default=True)
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def builder(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def registry_digest(name: str, reference: str) -> str:
    """What the registry itself says (Docker-Content-Digest), not what the engine or we think."""
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{name}/manifests/{reference}", method="HEAD", headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as response:
        return str(response.headers["Docker-Content-Digest"])


def _passed_as_built(client: DockerClient, spec: ImageSpec) -> bool:
    """Its last smoke result passed, on the image the engine holds under its tag now."""
    result = stored.load(WS.store.results, spec.id)
    return result is not None and result.verdict == "passed" and result.image_id == engine.image_id(client, spec.tag)


@pytest.fixture(scope="module")
def tested(docker_client: DockerClient) -> None:
    """The slice built and smoke-tested. After test_slice.py (same lane, same repository) the images
    are up to date and tested; what its hung-image test left failed is tested again. Run alone,
    this module builds and tests the whole slice."""
    done = builder("build", "-j", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    for spec in [s for s in SLICE if not _passed_as_built(docker_client, s)]:
        done = builder("test", "--select", f"id={spec.id}")
        assert done.returncode == 0, done.stdout[-3000:]
    assert all(_passed_as_built(docker_client, s) for s in SLICE)


@pytest.fixture(scope="module")
def published(
    tested: None, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient
) -> Iterator[tuple[Path, subprocess.CompletedProcess[str]]]:
    catalog = tmp_path_factory.mktemp("catalog")
    keys = tmp_path_factory.mktemp("keys")  # the signing key lives outside the catalog and every build context
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", SIGNER, "-f", str(keys / "key")], check=True)
    (catalog / "allowed_signers").write_text(f"{SIGNER} {' '.join((keys / 'key.pub').read_text().split()[:2])}\n")
    done = builder("publish", "--registry", REPOSITORY, "--catalog", str(catalog), "--sign-key", str(keys / "key"))
    yield catalog, done
    for tag in {t for image in docker_client.api.images(name=REPOSITORY) for t in image.get("RepoTags") or []}:
        engine.remove_image_quietly(docker_client, tag)


def _records(catalog: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in json.loads((catalog / "known-good.json").read_text())["images"]}


def test_publish_pushes_the_slice_and_records_registry_digests(published: tuple[Path, Any]) -> None:
    catalog, done = published
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    records = _records(catalog)
    assert set(records) == {s.id for s in SLICE}
    for spec in SLICE:
        record = records[spec.id]
        assert record["digest"] == f"{REPOSITORY}@{registry_digest(NAME, spec.id)}", "catalog digest == registry digest"
        assert record["content_hash"] == spec.content_hash and record["verdict"] == "passed"
        assert record["frameworks"] == {spec.stack: spec.versions[spec.stack]}, "measured inside the image"
        assert record["python"].startswith(spec.python + ".")
        assert record["host"]["gpu"] == "no GPU" and record["accelerator"]["kind"] == "cpu"
        assert record["lock_sha256"] and record["base"]["id"].startswith("sha256:")
        for floating in record["floating"]:
            assert registry_digest(NAME, floating.rsplit(":", 1)[1]) == record["digest"].split("@")[1]
        manifest = (catalog / record["manifest"]).read_text()
        frozen = manifest.replace("_", "-").lower()
        for pin in spec.packages:  # every top-level pin of the plan, as pip freeze reports it
            name, version = pin.split("==")
            assert f"\n{name.split('[')[0].lower()}=={version}\n" in frozen, pin
        assert "## dpkg" in manifest and f"\npython{spec.python} " in manifest and "VIRTUAL_ENV=/opt/venv" in manifest
        # its layers above the base, measured from the engine (what `catalog` splits into shared and own bytes)
        layers = record.get("layers")
        assert layers and all(layer["diff_id"].startswith("sha256:") and layer["size"] >= 0 for layer in layers), record.get("layers")
        assert sum(layer["size"] for layer in layers) > 10_000_000, "the venv layer is among them"
    text = (catalog / "known-good.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", "deterministic form"


def registry_files(name: str, tag: str) -> dict[str, bytes]:
    """The files of an evidence tag, read through the registry's HTTP API (manifest, then its one layer)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"http://{REGISTRY}/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES})
    with opener.open(request, timeout=30) as response:
        layers = json.loads(response.read())["layers"]
    assert len(layers) == 1, "an evidence image is one layer FROM scratch"
    with opener.open(f"http://{REGISTRY}/v2/{name}/blobs/{layers[0]['digest']}", timeout=30) as response:
        blob = response.read()
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        return {m.name.lstrip("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_each_digest_has_its_sbom_and_signed_attestation_in_the_registry(published: tuple[Path, Any], tmp_path: Path) -> None:
    catalog, done = published
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for spec in SLICE:
        digest = _records(catalog)[spec.id]["digest"].split("@")[1]
        hexdigest = digest.removeprefix("sha256:")
        sbom_files = registry_files(NAME, f"sha256-{hexdigest}.sbom")
        assert sbom_files["sbom.cdx.json"] == (catalog / "evidence" / f"{spec.id}.sbom.cdx.json").read_bytes()
        sbom.validate(sbom_files["sbom.cdx.json"].decode(), spec.id)
        assert spec.lock is not None
        found = sbom.python_set(sbom_files["sbom.cdx.json"].decode())
        pins = dict(spec.lock.pins)  # the venv's own pip (and setuptools, unless the lock pins it) aside
        assert {n: v for n, v in found.items() if n in pins or n not in sbom.VENV_TOOLS} == pins, "the SBOM read from the image == the lock"
        text = sbom_files["sbom.cdx.json"].decode()
        assert f'"pkg:deb/debian/python{spec.python}@' in text and '"SHA-256"' in text, "dpkg packages and the lock's hashes are in"
        att = registry_files(NAME, f"sha256-{hexdigest}.att")
        statement = json.loads(att["attestation.intoto.json"])
        assert statement["subject"][0]["digest"] == {"sha256": hexdigest} and statement["predicate"]["gpu"]["model"] == "no GPU"
        (tmp_path / "att.json").write_bytes(att["attestation.intoto.json"])
        (tmp_path / "att.json.sig").write_bytes(att["attestation.intoto.json.sig"])
        plain = subprocess.run(  # docs/commands.md's command: OpenSSH alone, on the files the registry holds
            ["ssh-keygen", "-Y", "verify", "-f", str(catalog / "allowed_signers"), "-I", SIGNER, "-n", "attestation@gpu-image-builder",
             "-s", str(tmp_path / "att.json.sig")], input=att["attestation.intoto.json"], capture_output=True, check=False,
        )  # fmt: skip
        assert plain.returncode == 0, plain.stderr
        record = catalog / "evidence" / f"{spec.id}.record.json"
        plain = subprocess.run(
            ["ssh-keygen", "-Y", "verify", "-f", str(catalog / "allowed_signers"), "-I", SIGNER, "-n", "record@gpu-image-builder",
             "-s", f"{record}.sig"], input=record.read_bytes(), capture_output=True, check=False,
        )  # fmt: skip
        assert plain.returncode == 0, plain.stderr


def test_pull_and_catalog_verify_refuse_a_tampered_record(published: tuple[Path, Any], tmp_path: Path) -> None:
    catalog, _ = published
    copy = tmp_path / "catalog"
    shutil.copytree(catalog, copy)
    numba = next(s for s in SLICE if s.stack == "numba")
    doc = json.loads((copy / "known-good.json").read_text())
    for item in doc["images"]:
        if item["id"] == numba.id:
            item["verdict"] = "gpu-skipped"  # a plausible edit: every field still valid, only the signature says no
    (copy / "known-good.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    for args in (("pull", f"id={numba.id}"), ("catalog", "--verify", "--format", "json")):
        done = builder(*args, "--catalog", str(copy))
        assert done.returncode == 1, done.stdout + done.stderr
        assert "it was changed after it was signed" in done.stdout + done.stderr


def test_pull_by_query_gets_the_same_digest_back(published: tuple[Path, Any], docker_client: DockerClient) -> None:
    catalog, _ = published
    torch = next(s for s in SLICE if s.stack == "torch")
    record = _records(catalog)[torch.id]
    assert engine.image_id(docker_client, record["tag"]) is None, "publish leaves no push name in the engine"
    engine.remove_image_quietly(docker_client, record["tag"])  # the pull must bring the name back by digest
    version = ".".join(torch.versions["torch"].split(".")[:2])
    # README's `pull torch=2.13 python=3.11`
    done = builder("pull", f"torch={version}", f"python={torch.python}", "--catalog", str(catalog))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"docker run --rm -it {record['digest']}"
    assert record["digest"] in docker_client.api.inspect_image(record["digest"])["RepoDigests"]
    assert docker_client.api.inspect_image(record["tag"])["Id"] == docker_client.api.inspect_image(torch.tag)["Id"]


def test_pull_without_a_match_names_the_closest(published: tuple[Path, Any]) -> None:
    catalog, _ = published
    done = builder("pull", "torch=9.9", "--catalog", str(catalog))
    assert done.returncode == 1
    assert "no known-good image matches 'torch=9.9'; closest: torch" in done.stderr and done.stderr.count("\n") == 1


def test_catalog_lists_and_verifies(published: tuple[Path, Any]) -> None:
    catalog, _ = published
    done = builder("catalog", "vendor=cpu", "--verify", "--format", "json", "--catalog", str(catalog))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {r["id"] for r in data["images"]} == {s.id for s in SLICE}
    assert all(v["ok"] for v in data["verify"].values())


def test_verify_reports_a_digest_the_registry_no_longer_has(published: tuple[Path, Any], tmp_path: Path) -> None:
    catalog, _ = published
    doc = json.loads((catalog / "known-good.json").read_text())
    doc["images"][0]["digest"] = doc["images"][0]["digest"].split("@")[0] + "@sha256:" + "0" * 64
    (tmp_path / "known-good.json").write_text(json.dumps(doc))
    done = builder("catalog", "--verify", "--catalog", str(tmp_path))
    moved = doc["images"][0]
    assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout
    assert f"{moved['id']}: {moved['tag']}: points at sha256:" in done.stderr and f"not the record's sha256:{'0' * 64}" in done.stderr


def test_untested_and_failed_images_are_refused(published: tuple[Path, Any], tmp_path: Path) -> None:
    numba = next(s for s in SLICE if s.stack == "numba")
    results = ROOT / "build" / "results" / f"{numba.id}.json"
    index = results.parent / stored.INDEX
    saved, saved_index = results.read_text(), index.read_text()
    try:
        results.unlink()
        done = builder("publish", "--select", f"id={numba.id}", "--registry", REPOSITORY, "--catalog", str(tmp_path))
        assert done.returncode == 1 and "never tested" in done.stdout
        passed = stored.from_json(json.loads(saved), str(results))
        failed = replace(
            passed, verdict="failed", returncode=1, tests=replace(passed.tests, failures=1), failures=("test_pip_check_is_clean: boom",)
        )
        stored.write(results.parent, failed)  # as a test run that failed writes it
        done = builder("publish", "--select", f"id={numba.id}", "--registry", REPOSITORY, "--catalog", str(tmp_path))
        assert done.returncode == 1 and "its smoke tests failed" in done.stdout
        results.write_text(results.read_text().replace('"verdict": "failed"', '"verdict": "passed"'))  # hand-edited
        done = builder("publish", "--select", f"id={numba.id}", "--registry", REPOSITORY, "--catalog", str(tmp_path))
        assert done.returncode == 1 and "changed since the test run wrote it" in " ".join(done.stderr.split()), done.stderr
    finally:
        results.write_text(saved)
        index.write_text(saved_index)
    assert not (tmp_path / "known-good.json").exists(), "nothing refused is recorded"
    done = builder("build", "--push")
    assert done.returncode == 2 and "--push is gone" in done.stderr and "builder publish" in done.stderr


class _Failing(http.server.BaseHTTPRequestHandler):
    """A registry that answers every request with 503."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_GET  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


@pytest.mark.parametrize("state", ["down", "failing"])
def test_a_registry_that_is_down_or_failing_is_one_line_and_leaves_the_catalog(
    published: tuple[Path, Any], state: str, docker_client: DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry that is down fails each of the default 4 tries at once; one that answers 503 too:
    the engine's own upload retries (five, ~50 s) end the try at their first "Retrying in" (the
    retry loop is tested offline in tests/test_usecases.py)."""
    tries = 4
    monkeypatch.delenv("BUILDER_PUSH_TRIES", raising=False)
    catalog, _ = published
    before = (catalog / "known-good.json").read_bytes()
    numba = next(s for s in SLICE if s.stack == "numba")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    port = server.server_address[1]
    if state == "failing":
        threading.Thread(target=server.serve_forever, daemon=True).start()
    else:
        server.server_close()  # the port was free a moment ago: nothing listens there now
    started = time.monotonic()
    try:
        done = builder(
            "publish",
            "--select",
            f"id={numba.id}",
            "--registry",
            f"127.0.0.1:{port}/builder-test/down",
            "--catalog",
            str(catalog),
            timeout=600,
        )
    finally:
        if state == "failing":
            server.shutdown()
    assert done.returncode == 1
    assert f"failed after {tries} tries (network)" in done.stdout and "is the registry up" in done.stdout, done.stdout
    assert time.monotonic() - started < 120, "retries are bounded: ours, 2 + 4 + 8 s apart, not the engine's"
    assert (catalog / "known-good.json").read_bytes() == before
    stray = [t for image in docker_client.api.images() for t in image.get("RepoTags") or [] if t.startswith(f"127.0.0.1:{port}/")]
    assert stray == [], f"a failed push left its tag in the engine: {stray}"


def test_two_publishers_at_once_both_land(tested: None, tmp_path: Path, docker_client: DockerClient) -> None:
    repository = f"{REPOSITORY}-concurrent"
    commands = [
        [sys.executable, "-m", "builder", "publish", "--select", f"id={spec.id}", "--registry", repository, "--catalog", str(tmp_path)]
        for spec in SLICE[:2]
    ]
    try:
        procs = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
        outputs = [p.communicate(timeout=900) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        assert set(_records(tmp_path)) == {spec.id for spec in SLICE[:2]}
    finally:
        for tag in {t for image in docker_client.api.images(name=repository) for t in image.get("RepoTags") or []}:
            engine.remove_image_quietly(docker_client, tag)


def test_reproduce_rebuilds_the_canonical_record_and_names_the_layer_that_differs(published: tuple[Path, Any], tmp_path: Path) -> None:
    """`builder reproduce` (issue 41, part 6) on the published canonical numba image: the one rebuild
    it makes gives the attested image ID (`reproduced`, shown by `catalog`); a record whose signed
    attestation names another base layer `differs` at layer 0, found before any build (a rebuild is on
    this engine's base layers). Every image of the default selection is canonical now, so a record
    built with RUN (`not reproducible`) is tests/test_reproduce.py's, against the in-memory engine."""
    from builder.publish import evidence, signing
    from builder.util.fsio import dump_json

    catalog, _ = published
    numba = next(s for s in SLICE if s.stack == "numba")  # the smallest rebuild
    assert numba.canonical
    done = builder("reproduce", "--catalog", str(catalog), f"id={numba.id}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    statement = json.loads((catalog / "evidence" / evidence.statement_name(numba.id)).read_text())
    attested = dict(statement["predicate"]["built"])
    said = f"reproduced: image ID {attested['image_id']} and its {len(attested['diff_ids'])} layers equal the record's"
    assert done.stdout.startswith(said), done.stdout  # `(rebuilt with the published image's ...)` when another checkout built it
    assert "signatures verified (signed by publish-test@example.org)" in done.stderr
    listed = json.loads(builder("catalog", "--catalog", str(catalog), "--format", "json").stdout)
    assert listed["reproduced"][numba.id]["outcome"] == "reproduced"

    copy = tmp_path / "catalog"  # a record signed by another allowed key whose attestation names another base layer
    shutil.copytree(catalog, copy)
    key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "other@example.org", "-f", str(key)], check=True)
    (copy / "allowed_signers").write_text(f"other@example.org {' '.join(Path(f'{key}.pub').read_text().split()[:2])}\n")
    other_base = "sha256:" + "0" * 64
    statement["predicate"]["built"]["diff_ids"] = [other_base, *attested["diff_ids"][1:]]
    names = {evidence.statement_name(numba.id): signing.ATTESTATION_NAMESPACE, evidence.record_name(numba.id): signing.RECORD_NAMESPACE}
    (copy / "evidence" / evidence.statement_name(numba.id)).write_text(dump_json(statement))
    for name, namespace in names.items():
        text = (copy / "evidence" / name).read_bytes()
        (copy / "evidence" / f"{name}{evidence.SIG}").write_text(signing.sign(text, key, namespace))
    differs = builder("reproduce", "--catalog", str(copy), f"id={numba.id}")
    assert differs.returncode == 1, differs.stdout + differs.stderr
    expected = f"differs: layer 0 (a layer of the base {numba.base.from_ref}): expected {other_base}, got {attested['diff_ids'][0]}"
    assert differs.stdout.startswith(expected) and "(not rebuilt:" in differs.stdout, differs.stdout
