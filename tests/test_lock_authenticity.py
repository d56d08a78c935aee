"""Issue 37, item 10: `builder lock --check --index`, a lock's hashes asked of its own sources.

The offline `lock --check` proves a lock is what `builder lock` writes for its inputs; someone who
edits a hash or a version and recomputes the `# body:` digest passes it (test_lock_integrity.py's
`reseal`). The online check passes only when every hash each pin allows is a file the lock's
sources publish for that package and version: here a stand-in simple index on 127.0.0.1 (PEP 691
JSON or PEP 503 HTML pages, built from the committed lock itself), and a local wheel folder."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from builder.lock.files import load
from builder.lock.published import JSON_TYPE, PageError, files_of, judge_pin, published_for, release_of
from tests.fake_index import closed_port_url
from tests.test_lock_integrity import reseal

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "numba0.68.0-cpu-py3.11-debian12"  # a cpu image: no framework index, every package from the default index
LOCK = f"images/{IMAGE}/requirements.lock"
RunCli = Callable[..., Result]


class Pages:
    """A simple index on 127.0.0.1: project -> (content type, body); 404 for any other."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[str, bytes]] = {}
        self.asked: list[str] = []
        pages = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                project = self.path.strip("/").split("/")[-1]
                pages.asked.append(project)
                kind, body = pages.pages.get(project, ("text/plain", b""))
                self.send_response(200 if project in pages.pages else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's signature
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def publish(self, lock_text: str, html_for: tuple[str, ...] = ()) -> None:
        """A page per pinned package listing one file per hash the lock allows, and an older release's file."""
        lock = load(lock_text, "lock")
        for name, version in lock.pins:
            hashes = dict(lock.hashes)[name]
            files = [(f"{name}-{version}-{n}-py3-none-any.whl", h) for n, h in enumerate(hashes)]
            files.append((f"{name}-0.0.1-py3-none-any.whl", "0" * 64))
            if name in html_for:
                links = "".join(f'<a href="../../files/{f}#sha256={h}">{f}</a>\n' for f, h in files)
                self.pages[name] = ("text/html", f"<!DOCTYPE html><html><body>{links}</body></html>".encode())
            else:
                doc = {"meta": {"api-version": "1.1"}, "files": [{"filename": f, "hashes": {"sha256": h}, "url": f} for f, h in files]}
                self.pages[name] = (JSON_TYPE, json.dumps(doc).encode())


@pytest.fixture
def pages() -> Iterator[Pages]:
    served = Pages()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copyfile(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    (tmp_path / "images").mkdir()
    shutil.copytree(ROOT / "images" / IMAGE, tmp_path / "images" / IMAGE)
    for other in (ROOT / "images").iterdir():  # every image folder, so the plan finds its locks; only IMAGE's is checked
        if other.is_dir() and other.name != IMAGE:
            shutil.copytree(other, tmp_path / "images" / other.name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(cli: RunCli, index: str, *more: str) -> Result:
    return cli("lock", "--check", "--index", "--no-host-settings", "--index-url", index, "--select", f"id={IMAGE}", *more)


def test_an_untouched_lock_is_published_by_its_index(repo: Path, pages: Pages, cli: RunCli) -> None:
    text = (repo / LOCK).read_text(encoding="utf-8")
    pages.publish(text, html_for=("numpy",))  # one page as PEP 503 HTML, the rest as PEP 691 JSON
    result = check(cli, pages.url)
    assert result.exit_code == 0, result.output
    assert "1 locks' hashes published by their sources" in result.stderr
    assert sorted(set(pages.asked)) == sorted(name for name, _ in load(text, "lock").pins), "each pinned project asked once"


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        # a hash the index publishes, but for another release (0.0.1): not numpy 2.4.6's
        (
            "--hash=sha256:001fbb8e08d942dd57599e781f2472269ee7f2755fae407b4f67b2f0b17da3f1",
            "--hash=sha256:" + "0" * 64,
            "numpy==2.4.6: 1 hash(es) the lock allows are of no file",
        ),
        ("llvmlite==0.50.0 ", "llvmlite==0.50.1 ", "llvmlite==0.50.1: no file of this version is published"),
    ],
    ids=["an edited hash", "a changed version"],
)
def test_a_resealed_edit_passes_the_offline_check_and_fails_the_index(
    repo: Path, pages: Pages, cli: RunCli, old: str, new: str, says: str
) -> None:
    text = (repo / LOCK).read_text(encoding="utf-8")
    pages.publish(text)
    assert old in text
    (repo / LOCK).write_text(reseal(text.replace(old, new, 1)), encoding="utf-8")
    offline = cli("lock", "--check", "--select", f"id={IMAGE}")
    assert offline.exit_code == 0, f"the offline check proves integrity, not authenticity: {offline.output}"
    result = check(cli, pages.url)
    assert result.exit_code == 1, result.output
    line = next(line for line in result.stdout.splitlines() if line.startswith("unpublished: "))
    assert line.startswith(f"unpublished: images/{IMAGE}/requirements.lock: ") and says in line, line


def test_an_index_that_cannot_be_reached_leaves_the_lock_unchecked_in_one_line(repo: Path, cli: RunCli) -> None:
    result = check(cli, closed_port_url("/simple"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    line = next(line for line in result.stdout.splitlines() if line.startswith("unchecked: "))
    assert "cannot be checked: cannot read" in line and "connection refused" in line.lower(), line


def test_index_goes_with_check(repo: Path, cli: RunCli) -> None:
    result = cli("lock", "--index", "--select", f"id={IMAGE}")
    assert result.exit_code == 2 and "--index goes with --check" in result.output


def test_a_wheel_folder_is_a_source_by_the_sha256_of_its_files(repo: Path, pages: Pages, cli: RunCli, tmp_path: Path) -> None:
    """A pin a local wheel satisfies is checked against the file itself (the build installs that file)."""
    text = (repo / LOCK).read_text(encoding="utf-8")
    pages.publish(text)
    del pages.pages["numpy"]  # numpy only in the folder
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel = folder / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not the real numpy")
    import hashlib

    own = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert check(cli, pages.url, "--wheelhouse", str(folder)).exit_code == 1, "the lock's numpy hashes are not this file's"
    block = text.split("numpy==2.4.6 \\\n", 1)[1].split("    # via", 1)[0]
    (repo / LOCK).write_text(reseal(text.replace(block, f"    --hash=sha256:{own}\n", 1)), encoding="utf-8")
    result = check(cli, pages.url, "--wheelhouse", str(folder))
    assert result.exit_code == 0, result.output


# -- the pure part -----------------------------------------------------------------------------
def test_pages_are_read_as_pep_691_json_or_pep_503_html_and_nothing_else() -> None:
    h = "a" * 64
    html = f'<a href="https://files/x/numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl#sha256={h}">n</a><a href="nohash.whl">x</a>'
    assert files_of(html.encode(), "text/html", "p") == {"numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl": h}
    doc = {"files": [{"filename": "numpy-2.4.6.tar.gz", "hashes": {"sha256": h}}, {"filename": "x.whl", "hashes": {"md5": "1"}}]}
    assert files_of(json.dumps(doc).encode(), JSON_TYPE, "p") == {"numpy-2.4.6.tar.gz": h}
    with pytest.raises(PageError):
        files_of(b'{"releases": {}}', "application/json", "p")
    assert release_of(f"numpy-2.{'1' * 4400}-py3-none-any.whl") is None, "a version int() refuses is no file of any release"


def test_a_hash_of_another_version_or_project_does_not_count() -> None:
    h, other = "a" * 64, "b" * 64
    files = {"numpy-2.4.6-py3-none-any.whl": h, "numpy-2.4.5-py3-none-any.whl": other, "numpyx-2.4.6-py3-none-any.whl": other}
    published = published_for("NumPy", "2.4.6", files)
    assert published == {h}
    assert judge_pin("numpy", "2.4.6", (h,), published, "i") is None
    problem = judge_pin("numpy", "2.4.6", (h, other), published, "i")
    assert problem is not None and "1 hash(es)" in problem.line()
