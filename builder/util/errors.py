"""The two errors users see, each one line on stderr: what they can fix (exit 2), and what failed
while running (exit 1)."""

from __future__ import annotations

from builder.util.text import redact


class UserError(Exception):
    """A problem the user can fix; printed as one line `error: [file:line: ]message`, exit code 2.

    The message is redacted here (builder.util.text.redact), not only where the CLI prints it: an error
    travels (doctor's table, a nightly summary, a catalog --verify cell), and a credential in a URL
    it quotes ($DOCKER_HOST, an index URL) must not reach any of them."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        message = redact(message)
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def __str__(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}: {self.message}"
        if self.file:
            return f"{self.file}: {self.message}"
        return self.message


class RunFailure(Exception):
    """The run started but something outside the user's input failed (a registry that is down,
    an engine lost mid-run); printed as one line `error: message`, exit code 1. Redacted as UserError is."""

    def __init__(self, message: str) -> None:
        message = redact(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM/SIGHUP: unwinds like KeyboardInterrupt, so every cleanup runs; exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
