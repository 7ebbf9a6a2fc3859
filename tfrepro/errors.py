"""One root error class and its two kinds (the pattern of copier/errors.py).

The CLI turns a `TfreproError` into one message and an exit code in a single
place (`tfrepro.cli`); library code never calls `sys.exit`.
"""

from __future__ import annotations

from pathlib import Path


class TfreproError(Exception):
    """Something went wrong while doing the work (exit code 1)."""

    exit_code = 1


class UserError(TfreproError):
    """Bad input from the user: usage, manifest, markers (exit code 2).

    `where` is "file:line" (or just a path) when the error points at a place;
    `hint` says how to fix it.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.hint = hint
        super().__init__(self.render())

    @property
    def where(self) -> str | None:
        if self.path is None:
            return None
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def render(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text
