"""The one owner of a project's state directory, `.tfrepro/`.

Every directory and file tfrepro creates under it goes through `StateDir`:
run dirs, trial dirs, cache entries, commit checkouts, temp dirs. That is how
the invariant "invisible to `git status`" holds in every mode: `ensure()`
writes `.tfrepro/.gitignore` (holding `*`, as pytest does for its cache)
before anything else is created, and there is no second way to create a path
under it (tests/test_state.py checks the callers).

Layout:
    .gitignore
    cache/<key>.json                  one finished trial (atomic writes)
    trials/<key[:16]>-<random>/       one trial's variant, config, result, logs
    runs/<id>/                        one bisect: result.json, trials/<n>-.../
    checkouts/<pid>-<ns>/<sha>/       commit mode's read-only copies
    tmp/                              scratch (e.g. a Ray task run in-process)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tfrepro.trials.values import TrialResult

STATE_DIR_NAME = ".tfrepro"
GITIGNORE = "# created by tfrepro: nothing in here belongs in git\n*\n"
LOGS = ("stdout.log", "stderr.log")


class StateDir:
    """`<project>/.tfrepro` (or any state dir a caller names)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def of(cls, project_root: str | Path) -> "StateDir":
        return cls(Path(project_root) / STATE_DIR_NAME)

    def __repr__(self) -> str:
        return f"StateDir({str(self.path)!r})"

    # -- the directory itself ----------------------------------------------
    def ensure(self) -> Path:
        """Create the state dir if needed, and always its `.gitignore` (also in
        a dir that some older version or a `mkdir -p` created without one)."""
        self.path.mkdir(parents=True, exist_ok=True)
        ignore = self.path / ".gitignore"
        if not ignore.is_file():
            atomic_write_text(ignore, GITIGNORE)
        return self.path

    def sub(self, *parts: str) -> Path:
        """A directory below the state dir, created."""
        d = self.ensure().joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def temp_dir(self, prefix: str, where: str = "tmp") -> Path:
        """A new, unique directory under `where/` (trials, scratch)."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.sub(where)))

    # -- trials and the cache ----------------------------------------------
    def new_trial_dir(self, key: str) -> Path:
        return self.temp_dir(f"{key[:16]}-", "trials")

    def cache_file(self, key: str) -> Path:
        return self.path / "cache" / f"{key}.json"

    def load_cached(self, key: str) -> TrialResult | None:
        """The cached result of trial `key`, or None (missing, unreadable, or
        written by an incompatible version: run it again)."""
        return load_result(self.cache_file(key))

    def store(self, key: str, result: TrialResult) -> None:
        """Cache a finished trial. A could-not-run result is never cached."""
        if result.could_not_run:
            return
        self.sub("cache")
        atomic_write_json(self.cache_file(key), result.to_dict())

    # -- runs --------------------------------------------------------------
    def new_run_dir(self, run_id: str | None = None) -> Path:
        """`runs/<id>` (default: local time), `-2`, `-3`... when taken; created
        with its `trials/` subdirectory."""
        base = self.sub("runs")
        stamp = run_id or time.strftime("%Y%m%d-%H%M%S")
        for n in range(1, 1000):
            d = base / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                d.mkdir()
            except FileExistsError:
                continue
            (d / "trials").mkdir()
            return d
        raise FileExistsError(f"cannot create a run directory under {base}")

    def checkouts_dir(self) -> Path:
        return self.sub("checkouts")


def load_result(path: Path) -> TrialResult | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    try:
        return TrialResult.from_dict(data)
    except (TypeError, ValueError):
        return None


def write_trial_record(dest: Path, summary: dict[str, Any], log_dir: str | None) -> None:
    """One trial of a run, in the run dir: its summary and its logs (hard
    links when possible: the logs already live in the trial dir)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    if not log_dir:
        return
    for name in LOGS:
        src = Path(log_dir) / name
        if src.is_file():
            try:
                os.link(src, dest / name)
            except OSError:
                shutil.copyfile(src, dest / name)


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False, default=str))
