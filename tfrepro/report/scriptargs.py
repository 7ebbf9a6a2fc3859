"""The script's own arguments in the bundle (`tfrepro bisect train.py --
--epochs 3`): the run's trial command carries them; the exported repro.py
says how to run it with them (a comment), and the notebook sets `sys.argv`
to them before the script's code runs."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from tfrepro.settings import TrialSettings


def script_args(settings: TrialSettings, entry: str) -> list[str]:
    """The arguments after the entry script in the trial command ([] when none)."""
    cmd = list(settings.command or ())
    if entry not in cmd:
        return []
    return cmd[cmd.index(entry) + 1 :]


def comment_entry(text: str, entry: str, args: Sequence[str]) -> str:
    """`text` with a first comment line saying how to run it (after a
    shebang or an encoding line, which must stay first)."""
    if not args:
        return text
    lines = text.splitlines(keepends=True)
    at = 0
    while at < min(2, len(lines)) and (
        lines[at].startswith("#!") or "coding" in lines[at][:40] and lines[at].startswith("#")
    ):
        at += 1
    note = f"# run it with its arguments: python {entry} {shlex.join(args)}\n"
    return "".join([*lines[:at], note, *lines[at:]])


def notebook_code(code: str, entry: str, args: Sequence[str]) -> str:
    """The script for the notebook: `sys.argv` set to its arguments first."""
    if not args:
        return code
    return f"import sys\n\nsys.argv = {[entry, *args]!r}  # the script's arguments\n\n" + code
