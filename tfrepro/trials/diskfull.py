"""A full disk is the machine's problem, never a trial's verdict: a copy or a
trial that fails for want of space ends the command with one clear message
(which file system, how much is free, what to do), its half-written trial
directory removed at once, and nothing cached."""

from __future__ import annotations

import contextlib
import errno
import shutil
from pathlib import Path

from tfrepro.errors import TfreproError
from tfrepro.trials.values import TrialResult

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "ENOSPC")
# A trial that crashed with less free space than this likely crashed of it.
_LOW_BYTES = 1 << 20


class DiskFullError(TfreproError):
    """No space left where `.tfrepro/` (a trial's copy, its logs) lives."""


def _free(path: Path) -> int | None:
    for p in (path, *path.parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(p).free
    return None


def disk_full(what: OSError | TrialResult, trial_dir: Path) -> DiskFullError | None:
    """The error to raise when `what` (an exception while making or running
    the trial, or its crashed result) is a full disk, else None. The trial
    dir is removed at once when it is."""
    if isinstance(what, OSError):
        full = what.errno in NO_SPACE
    else:
        crashed = what.crashed or bool(what.extra.get("no_result"))
        text = what.error or ""
        free = _free(Path(trial_dir))
        full = crashed and (any(t in text for t in _NO_SPACE_TEXT) or (free is not None and free < _LOW_BYTES))
    if not full:
        return None
    shutil.rmtree(trial_dir, ignore_errors=True)
    free = _free(Path(trial_dir))
    left = f" ({free / 2**20:.1f} MB free)" if free is not None else ""
    return DiskFullError(
        f"no space left on the disk holding {Path(trial_dir).parent.parent}{left}: the trial's copy could not be "
        "written or the trial ran out of space; nothing was cached and its half-written directory was removed. "
        "Free some space (`tfrepro clean` removes old runs and copies), or lower `[state] keep_trials`, then run again"
    )
