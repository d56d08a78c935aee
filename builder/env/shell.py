"""Opening a team environment (pure): the `docker run` argv of `builder env shell`, and the
.devcontainer/devcontainer.json an editor that speaks the Dev Container spec opens the same way.

Both carry the same GPU options (builder.smoke.args.gpu_flags decides them for the host's vendor),
mount the project folder at the env file's workdir, and run as the person's uid and gid, so files
written in the folder stay theirs.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from builder.env.envfile import EnvFile
from builder.util.errors import UserError

DEVCONTAINER = Path(".devcontainer") / "devcontainer.json"
SCHEMA = Path(__file__).resolve().parent / "data" / "devcontainer.schema.json"
SCHEMA_SOURCE = "https://github.com/devcontainers/spec/blob/main/schemas/devContainer.base.schema.json"


def run_argv(env: EnvFile, image: str, gpu: Sequence[str], project: Path, uid: int, gid: int, command: Sequence[str] = ()) -> list[str]:
    if "," in str(project) or not str(project).isprintable():
        raise UserError(f"the project folder {project} has a comma or a control character, which `docker run --mount` cannot take; move it")
    return [
        "docker", "run", "--rm", "-it", *gpu,
        "--user", f"{uid}:{gid}",
        "--env", "HOME=/tmp",  # the uid may have no home in the image
        "--mount", f"type=bind,source={project},target={env.workdir}",
        "--workdir", env.workdir,
        image, *(command or ("bash",)),
    ]  # fmt: skip


def run_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def devcontainer(env: EnvFile, image: str, gpu: Sequence[str], vendor: str) -> dict[str, Any]:
    """An image container: the derived image by its tag, the same GPU options as `builder env shell`."""
    return {
        "name": env.id,
        "image": image,
        "runArgs": list(gpu),
        "workspaceFolder": env.workdir,
        "workspaceMount": f"source=${{localWorkspaceFolder}},target={env.workdir},type=bind",
        "remoteUser": "app",
        "updateRemoteUserUID": True,
        "hostRequirements": {"gpu": vendor != "cpu"},
    }


def devcontainer_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return loaded
