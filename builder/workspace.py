"""Where a command works: the matrix file, the folders beside it (templates/, images/, build/),
its plan, and what it renders to.

Everything here is pure and lazy: a command pays only for what it asks for.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from builder.catalog.store import Catalog
from builder.compat.rules import table
from builder.lock import line as lines
from builder.lock.claims import keep_older_gpus, with_lock_claims
from builder.lock.files import LOCK_NAME, load, verify
from builder.lock.target import LockTarget, target_for
from builder.model.locked_fit import FIT_NAME, LockedFit, lock_digest
from builder.model.locked_fit import from_json as fit_from_json
from builder.model.plan import ImageSpec, Lock, Matrix, Plan
from builder.render.context import Files, content_hash, contexts
from builder.render.swap import recover
from builder.render.tree import expected_tree
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.spec.select import fields_of, no_match, parse_select, select
from builder.util.errors import UserError
from builder.util.fsio import read_json
from builder.util.query import matches

MATRIX_ENV = "BUILDER_MATRIX"
MAX_LOCK = 2 * 2**20  # a lock of every CUDA wheel with every hash is ~0.2 MB
MAX_FIT = 16 * 2**20  # a fit.json with every reading of a torch image is ~0.1 MB


@dataclass(frozen=True)
class Store:
    """Where a workspace keeps what its commands find and publish: the catalog beside matrix.yaml,
    build/results (smoke results, build.json), build/nightly (history, summary) and the report's
    two pages. One owner, so no command spells `build / "results"` on its own."""

    root: Path  # the folder of matrix.yaml

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def catalog_dir(self) -> Path:
        return self.root / "catalog"

    @property
    def results(self) -> Path:
        return self.build / "results"

    @property
    def build_summary(self) -> Path:
        return self.results / "build.json"

    @property
    def reproduced(self) -> Path:
        """`builder reproduce`'s verdicts, one per record (model/reproduced.py)."""
        return self.results / "reproduced.json"

    @property
    def nightly(self) -> Path:
        return self.build / "nightly"

    @property
    def history(self) -> Path:
        return self.nightly / "last.json"

    @property
    def nightly_summary(self) -> Path:
        return self.nightly / "summary.md"

    @property
    def wheel_readings(self) -> Path:
        """What each wheel's device code was read to be, by the file's sha256 (usecases/measure.py)."""
        return self.build / "wheel-fit"

    @property
    def report_markdown(self) -> Path:
        return self.root / "docs" / "support-matrix.md"

    @property
    def report_html(self) -> Path:
        return self.build / "report" / "index.html"

    def catalog(self, override: str | None = None, *, must_exist: bool = False) -> Catalog:
        """The --catalog folder, else catalog/ beside the matrix. `must_exist`: for the commands that
        only read it (catalog, pull, report), a --catalog folder that is not there is a typo, exit 2;
        publish and nightly create it on their first record."""
        if override:
            return Catalog(Path(override), named=must_exist)
        return Catalog(self.catalog_dir)


@dataclass(frozen=True)
class Workspace:
    matrix_path: Path
    lock_overrides: tuple[tuple[str, Lock], ...] = ()  # image id -> the lock to use instead of the one on disk
    fit_overrides: tuple[tuple[str, LockedFit], ...] = ()  # image id -> the measured fit to use instead of its fit.json

    @staticmethod
    def locate(option: str | None) -> Workspace:
        """--matrix wins, then $BUILDER_MATRIX, then ./matrix.yaml."""
        path = Path(option or os.environ.get(MATRIX_ENV) or "matrix.yaml")
        return Workspace(path.expanduser().absolute())

    @property
    def root(self) -> Path:
        return self.matrix_path.parent

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def store(self) -> Store:
        return Store(self.root)

    @property
    def build_dir(self) -> Path:
        return self.store.build

    @functools.cached_property
    def matrix(self) -> Matrix:
        return load_matrix(self.matrix_path)

    @functools.cached_property
    def decided(self) -> Plan:
        """The plan without content hashes, every image decided (render, `lock --check` and `plan` read
        them all; a selection decides only its own: `selected`). Each image carries its lock
        (images/<id>/requirements.lock, as `builder lock` wrote it), matrix.yaml's policies for it
        (`unlocked`, `cuda_exceptions`, `keep_older_gpus`, `canonical_layers`, each with its reason) and the claims its
        lock makes (builder.lock.claims)."""
        images = self.decide(self.lined)
        warnings = tuple(sorted({w for spec in images for w in spec.warnings}))
        return replace(self._planned, images=images, warnings=warnings)

    @functools.cached_property
    def lined(self) -> tuple[ImageSpec, ...]:
        """The planned images with their CUDA lines, before any lock is read: what a selection matches
        (spec/select.py `fields_of` reads nothing that deciding adds), so a command on a few images
        decides those few (`decide`), not the whole matrix."""
        return self._lines(self._planned.images)

    def decide(self, specs: tuple[ImageSpec, ...]) -> tuple[ImageSpec, ...]:
        """These images of `lined`, decided as `decided` has them (each once per workspace): its lock
        read and checked, its fit, the policies that name it."""
        done = self._decided_ids
        for spec in specs:
            if spec.id not in done:
                done[spec.id] = self._decide_one(spec)
        return tuple(done[spec.id] for spec in specs)

    @functools.cached_property
    def _decided_ids(self) -> dict[str, ImageSpec]:
        """The images `decide` has decided so far, by id."""
        return {}

    @functools.cached_property
    def _decide_one(self) -> Callable[[ImageSpec], ImageSpec]:
        """How one image is decided, with matrix.yaml's policies parsed once."""
        recover(self.images_dir)  # a render killed mid-swap: its previous tree (and locks) back before they are read
        policy = [(parse_select(expr), reason) for expr, reason, _ in self.matrix.unlocked]
        exceptions = [(parse_select(expr), reason) for expr, reason, _ in self.matrix.cuda_exceptions]
        older_gpus = [parse_select(expr) for expr, _, _ in self.matrix.keep_older_gpus]
        canonical = [(parse_select(expr), reason) for expr, reason, _ in self.matrix.canonical_layers]
        overrides = dict(self.lock_overrides)
        fits = dict(self.fit_overrides)
        line_locks = {key: found for key, (target, found) in self.line_locks().items() if found and found.inputs == target.inputs}

        def decide(spec: ImageSpec) -> ImageSpec:
            spec = lines.joined(spec, line_locks)
            fields = fields_of(spec)
            exception = next((reason for selector, reason in exceptions if matches(selector, fields)), None)
            lock = overrides.get(spec.id) or checked_lock(spec, self.images_dir / spec.id / LOCK_NAME)
            spec = replace(
                spec,
                lock=lock,
                locked_fit=fits.get(spec.id) or current_fit(spec.id, lock, self.images_dir / spec.id / FIT_NAME),
                unlocked=next((reason for selector, reason in policy if matches(selector, fields)), None),
                cuda_exception=exception,
                # a canonical layer is made from a lock: an image without a current one installs with RUN as before
                canonical=next((reason for selector, reason in canonical if matches(selector, fields)), None) if lock else None,
                # an exception's CUDA wheels may leave the base's minor: nothing holds them to it
                constraints=() if exception is not None and not spec.base.cuda_from_wheels else spec.constraints,
            )
            if any(matches(selector, fields) for selector in older_gpus):
                spec = keep_older_gpus(spec, table())
            return with_lock_claims(spec, table())

        return decide

    def _lines(self, images: tuple[ImageSpec, ...]) -> tuple[ImageSpec, ...]:
        """Each image matrix.yaml's `line_layers` names, with its CUDA line (lock/line.py); naming an
        image whose CUDA is not from wheels is an error at the entry's line."""
        policy = [(parse_select(expr), expr, at) for expr, _, at in self.matrix.line_layers]
        out = []
        for spec in images:
            entry = next(((expr, at) for selector, expr, at in policy if matches(selector, fields_of(spec))), None)
            if entry is not None and not spec.base.cuda_from_wheels:
                raise UserError(
                    f"line_layers.select {entry[0]!r} names {spec.id}, whose CUDA is not from wheels (base {spec.base.name}): a line "
                    "shares NVIDIA library wheels; narrow the expression to CUDA-from-wheels images",
                    self.matrix.path,
                    entry[1],
                )
            out.append(replace(spec, line=lines.key_of(spec)) if entry is not None else spec)
        return tuple(out)

    def _read_line_lock(self, key: str, target: LockTarget) -> Lock | None:
        path = lines.path_of(self.images_dir, key)
        found = read_lock(path)
        if found is not None:
            lines.verify_line(found, target, _shown(path))
        return found

    def line_locks(self) -> dict[str, tuple[LockTarget, Lock | None]]:
        """Every CUDA line of the plan: its joint target and its lock as on disk (or the one `builder lock`
        is about to write), current or not (a member joins only a current one's pins: `decided`)."""
        return self._line_state

    @functools.cached_property
    def _planned(self) -> Plan:
        """The matrix's plan as spec/ makes it: before locks, policies and lines."""
        return make_plan(self.matrix)

    @functools.cached_property
    def _line_state(self) -> dict[str, tuple[LockTarget, Lock | None]]:
        recover(self.images_dir)  # as `decided`: a render killed mid-swap has its previous tree back first
        overrides = dict(self.lock_overrides)
        out: dict[str, tuple[LockTarget, Lock | None]] = {}
        for key, members in lines.members(self.lined).items():
            target = lines.target_of(key, members, table())
            out[key] = (target, overrides.get(target.image) or self._read_line_lock(key, target))
        return out

    def with_locks(self, locks: dict[str, Lock]) -> Workspace:
        """This workspace as if these images had these locks (what `builder lock` is about to write)."""
        return Workspace(self.matrix_path, tuple(sorted({**dict(self.lock_overrides), **locks}.items())), self.fit_overrides)

    def with_fits(self, fits: dict[str, LockedFit]) -> Workspace:
        """This workspace as if these images had these measured fits (what `builder lock` measured)."""
        return Workspace(self.matrix_path, self.lock_overrides, tuple(sorted({**dict(self.fit_overrides), **fits}.items())))

    def reread(self) -> None:
        """Forget what was read of matrix.yaml and images/ (the plan, its locks and fits, the
        contexts): the next use reads them again. For a run that changes them itself and goes on
        with its one workspace (the nightly adds new releases to matrix.yaml, then writes new locks)."""
        for name in ("matrix", "_planned", "lined", "_decide_one", "_decided_ids", "decided", "plan", "_contexts", "_line_state"):
            self.__dict__.pop(name, None)

    @functools.cached_property
    def _contexts(self) -> dict[str, Files]:
        return {}

    def contexts(self, specs: tuple[ImageSpec, ...]) -> dict[str, Files]:
        """Build contexts by image id, each rendered at most once per workspace."""
        missing = [spec for spec in specs if spec.id not in self._contexts]
        if missing:
            self._contexts.update(contexts(missing, self.matrix, [self.templates]))
        return {spec.id: self._contexts[spec.id] for spec in specs}

    def hashed(self, specs: tuple[ImageSpec, ...]) -> tuple[ImageSpec, ...]:
        rendered = self.contexts(specs)
        return tuple(replace(spec, content_hash=content_hash(rendered[spec.id])) for spec in specs)

    @functools.cached_property
    def plan(self) -> Plan:
        """The plan with every image's content hash."""
        decided = self.decided
        return Plan(images=self.hashed(decided.images), skipped=decided.skipped, warnings=decided.warnings)

    def selected(self, expr: str | None, *, use_default: bool) -> tuple[ImageSpec, ...]:
        """Images matching --select, else the matrix's defaults.select when asked, else all;
        only the chosen ones are decided (their locks read and checked) and rendered for their content hash."""
        if expr is None and use_default and self.matrix.default_select:
            return self.hashed(self.default_selection())
        selector = parse_select(expr or "")
        chosen = select(self.lined, selector)
        if selector and not chosen:
            raise UserError(no_match(selector, self.lined, "--select"))
        return self.hashed(self.decide(chosen))

    def default_selection(self) -> tuple[ImageSpec, ...]:
        """The union of defaults.select's expressions, in plan order. An expression that matches
        nothing, or that selects an image without a lock that matrix.yaml's `unlocked:` says cannot be
        locked (its index is out of reach: a fresh machine's default job would fail there), is an error
        at its own line."""
        images = self.lined
        chosen: set[str] = set()
        for text, line in self.matrix.default_select:
            selector = parse_select(text)
            found = select(images, selector)
            if not found:
                raise UserError(no_match(selector, images, "defaults.select"), self.matrix.path, line)
            unlocked = next((spec for spec in self.decide(found) if spec.lock is None and spec.unlocked), None)
            if unlocked is not None:
                raise UserError(
                    f"defaults.select {text!r} selects {unlocked.id}, which has no lock (matrix.yaml unlocked: {unlocked.unlocked}); "
                    "the default job must build on a fresh machine: narrow the expression to locked images and build that one with --select",
                    self.matrix.path,
                    line,
                )
            chosen.update(spec.id for spec in found)
        return self.decide(tuple(spec for spec in images if spec.id in chosen))

    def rendered_tree(self) -> Files:
        """Every file images/ should hold (see builder.render.tree.expected_tree)."""
        images = self.decided.images
        locks = {key: found.text for key, (_, found) in self.line_locks().items() if found is not None}
        return expected_tree(images, self.contexts(images), locks)


def checked_lock(spec: ImageSpec, path: Path) -> Lock | None:
    """The image's lock (read_lock), checked to be this image's and, when its inputs are current,
    what they lock (lock.files.verify): render never blesses and build never installs an edited lock."""
    lock = read_lock(path)
    if lock is not None:
        verify(lock, target_for(spec, table()), _shown(path))
    return lock


def current_fit(image: str, lock: Lock | None, path: Path) -> LockedFit | None:
    """The image's fit.json when it was measured from this very lock; None when there is none, or it
    is another lock's (stale: the next write of images/ drops it, `builder lock` measures again)."""
    if lock is None:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    shown = _shown(path)
    found = fit_from_json(
        read_json(path, MAX_FIT, "measured fit"),
        lambda what: UserError(f"{what}: not a fit.json `builder lock` wrote; restore it from git or run `builder lock`", shown),
    )
    return found if found.image == image and found.lock == lock_digest(lock.text) else None


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_lock(path: Path) -> Lock | None:
    """A lock file `builder lock` wrote, read without following links; None when there is no file
    there (a link or a special file is not one: render refuses those), a one-line UserError naming
    the line for a file that is not, byte for byte, a lock `builder lock` writes (lock.files.load)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO there must not hang the open
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # checked on the descriptor, before any read: a folder or a FIFO is never read
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_LOCK + 1)
    except OSError as exc:
        raise UserError(f"cannot be read ({exc.strerror}); check its permissions", _shown(path)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_LOCK:
        raise UserError(
            f"is larger than {MAX_LOCK} bytes, which no lock is; restore it from git or delete it and run `builder lock`", _shown(path)
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            "is not UTF-8 text, which no lock is; restore it from git or delete it and run `builder lock`", _shown(path), line
        ) from None
    return load(text, _shown(path))
