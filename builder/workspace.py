"""Where a command works: the matrix file, the folders beside it (templates/, images/, build/),
its plan, and what it renders to.

Everything here is pure and lazy: a command pays only for what it asks for.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from builder.errors import UserError
from builder.records import ImageSpec, Matrix, Plan
from builder.render.context import Files, content_hash, contexts
from builder.render.tree import expected_tree
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.spec.select import no_match, parse_select, select

MATRIX_ENV = "BUILDER_MATRIX"


@dataclass(frozen=True)
class Workspace:
    matrix_path: Path

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
    def build_dir(self) -> Path:
        return self.root / "build"

    @functools.cached_property
    def matrix(self) -> Matrix:
        return load_matrix(self.matrix_path)

    @functools.cached_property
    def decided(self) -> Plan:
        """The plan without content hashes: enough to select from."""
        return make_plan(self.matrix)

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
        only the chosen ones are rendered for their content hash."""
        from_default = expr is None and use_default
        if from_default:
            expr = self.matrix.default_select
        selector = parse_select(expr or "")
        chosen = select(self.decided.images, selector)
        if selector and not chosen:
            if from_default:
                raise UserError(no_match(selector, self.decided.images, "defaults.select"), self.matrix.path, self.matrix.default_select_line)
            raise UserError(no_match(selector, self.decided.images, "--select"))
        return self.hashed(chosen)

    def rendered_tree(self) -> Files:
        """Every file images/ should hold (see builder.render.tree.expected_tree)."""
        images = self.decided.images
        return expected_tree(images, self.contexts(images))
