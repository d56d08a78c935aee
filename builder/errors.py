"""The one error type users see: a one-line message, exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; printed as one line `error: [file:line: ]message`, exit code 2."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
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
