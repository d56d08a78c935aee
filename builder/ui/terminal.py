"""The two streams every command writes: data and summaries to stdout (`out`), logs, progress and
errors to stderr (`err`), so commands pipe (`builder plan --format json | jq`)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200, emoji=False)  # a value with :name: stays text
err = Console(stderr=True, soft_wrap=True, emoji=False)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))
