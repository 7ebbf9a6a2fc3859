"""A script that takes arguments and did not get them: argparse's usage
error (exit 2, "usage:" on stderr) is named as such, with the way to pass
the script's arguments (`tfrepro bisect train.py -- --epochs 3`)."""

from __future__ import annotations

import os
from pathlib import Path

USAGE_HINT = (
    "the script exited with its argparse usage error: pass the script's arguments after `--`, "
    "e.g. `tfrepro bisect train.py -- --epochs 3` (run, check and features take them the same way)"
)


def usage_error(rc: int | None, stderr_path: Path) -> str | None:
    """argparse's error line ("train.py: error: ...") when the script exited
    with code 2 after a `usage:` line on stderr; None otherwise. (TensorFlow's
    own log lines may come after it: the last line is not the one to quote.)"""
    lines = read_tail(stderr_path).splitlines() if rc == 2 else []
    starts = [i for i, line in enumerate(lines) if line.startswith("usage:")]
    if not starts:
        return None
    after = lines[starts[-1] :]
    return next((line.strip() for line in after if ": error: " in line), after[0].strip())


def read_tail(path: Path, tail: int = 65536) -> str:
    """The last `tail` bytes of a log file as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
