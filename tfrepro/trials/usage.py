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


def is_usage_error(rc: int | None, stderr_path: Path, tail: int = 65536) -> bool:
    """Exit code 2 with an argparse `usage:` line in the end of stderr."""
    if rc != 2:
        return False
    try:
        with open(stderr_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return False
    return any(line.startswith("usage:") for line in text.splitlines())
