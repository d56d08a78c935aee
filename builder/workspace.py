"""Where a command works: the matrix file, the folders beside it, and its plan."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from builder.matrix import load_matrix
from builder.plan import make_plan, with_hashes
from builder.records import ImageSpec, Matrix, Plan
from builder.select import parse_select, select

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
    def plan(self) -> Plan:
        return make_plan(self.matrix, template_dirs=[self.templates])

    @functools.cached_property
    def decided(self) -> Plan:
        """The plan without content hashes: enough to select from."""
        return make_plan(self.matrix, template_dirs=[self.templates], hashed=False)

    def selected(self, expr: str | None, *, use_default: bool) -> tuple[ImageSpec, ...]:
        """Images matching --select, else the matrix's defaults.select when asked, else all;
        only the chosen ones are rendered for their content hash."""
        if expr is None and use_default:
            expr = self.matrix.default_select
        chosen = select(self.decided.images, parse_select(expr or ""))
        return with_hashes(chosen, self.matrix, [self.templates])
