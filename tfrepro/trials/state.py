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

Pruning (`prune`, `clean`) deletes only below this directory and never
follows a symlink: a link is removed as a link, its target untouched; a
`runs/` or `trials/` that is itself a link is left alone. A trial dir that
looks in use (no result.json yet, touched within `IN_USE_S`) is never
removed, so a bisect running next door keeps its variants.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfrepro.projectfiles import STATE_DIR
from tfrepro.trials.values import TrialResult

STATE_DIR_NAME = STATE_DIR  # the name is the project layout's (projectfiles excludes it from variants)
GITIGNORE = "# created by tfrepro: nothing in here belongs in git\n*\n"
LOGS = ("stdout.log", "stderr.log")
# A trial dir without result.json touched more recently than this may belong
# to a trial still running: pruning leaves it alone.
IN_USE_S = 6 * 3600
_TRIAL_REF = re.compile(r"trials[/\\]+([0-9a-f]{16}-[A-Za-z0-9_]+)")


@dataclass
class Pruned:
    """What `prune` / `clean` removed."""

    runs: int = 0
    trials: int = 0
    variants: int = 0
    other: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, int]:
        return {
            "runs": self.runs,
            "trials": self.trials,
            "variants": self.variants,
            "other": self.other,
            "bytes": self.bytes,
        }

    def describe(self) -> str:
        if not self.paths:
            return "nothing to remove"
        return (
            f"removed {self.runs} runs, {self.trials} trials, {self.variants} trial copies and "
            f"{self.other} scratch dirs: {self.bytes / 2**20:.1f} MB freed"
        )


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

    # -- pruning -------------------------------------------------------------
    def _children(self, name: str) -> list[Path]:
        """Entries of `runs/` or `trials/`, oldest first; none when that dir
        is missing or a symlink (never followed out of the state dir)."""
        base = self.path / name
        if not base.is_dir() or base.is_symlink():
            return []
        entries = [(e.stat(follow_symlinks=False).st_mtime, e.name, Path(e.path)) for e in os.scandir(base)]
        return [p for _, _, p in sorted(entries)]

    def _remove(self, path: Path, out: Pruned, kind: str) -> None:
        if self.path not in path.parents:  # pragma: no cover - a bug, not an input
            raise ValueError(f"refusing to delete {path}: not below {self.path}")
        try:
            st = path.lstat()
        except FileNotFoundError:
            return
        size = tree_size(path)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path, ignore_errors=True)  # unlinks symlinks inside, never follows them
        else:
            path.unlink(missing_ok=True)
        setattr(out, kind, getattr(out, kind) + 1)
        out.bytes += size
        out.paths.append(str(path))

    def prune(self, keep_runs: int, keep_trials: int, *, variants: bool = False) -> Pruned:
        """Keep the newest `keep_runs` runs and `keep_trials` trial dirs.

        Older runs go whole. An older trial dir goes whole, unless a kept run
        refers to it (its summary's `log_dir`): then only its `variant/` goes
        (the logs stay). With `variants`, every trial dir's `variant/` goes.
        The cache is never touched; trial dirs in use are skipped."""
        out = Pruned()
        runs = self._children("runs")
        cut = max(0, len(runs) - keep_runs)
        for d in runs[:cut]:
            self._remove(d, out, "runs")
        referenced: set[str] = set()
        for d in runs[cut:]:
            for f in d.rglob("*.json"):
                if not f.is_symlink():
                    referenced.update(_TRIAL_REF.findall(f.read_text(encoding="utf-8", errors="replace")))
        trials = [d for d in self._children("trials") if not _in_use(d)]
        cut = max(0, len(trials) - keep_trials)
        for i, d in enumerate(trials):
            if i < cut and d.name not in referenced:
                self._remove(d, out, "trials")
            elif (i < cut or variants) and d.is_dir() and not d.is_symlink():
                self._remove(d / "variant", out, "variants")
        return out

    def clean(self, keep_runs: int, keep_trials: int, *, everything: bool = False) -> Pruned:
        """`tfrepro clean`: `prune` plus every trial's `variant/`, `tmp/` and
        checkouts of runs that are gone; with `everything`, the whole state
        dir (cache included; a symlinked state dir is removed as a link)."""
        out = Pruned()
        if not self.path.exists() and not self.path.is_symlink():
            return out
        if everything:
            if self.path.is_symlink():
                self.path.unlink()
                out.other += 1
                out.paths.append(str(self.path))
                return out
            for e in sorted(self.path.iterdir()):
                self._remove(e, out, "other")
            self.path.rmdir()
            return out
        out = self.prune(keep_runs, keep_trials, variants=True)
        tmp = self.path / "tmp"
        if tmp.is_dir() and not tmp.is_symlink():
            for e in tmp.iterdir():
                if not _in_use(e):
                    self._remove(e, out, "other")
        checkouts = self.path / "checkouts"  # <pid>-<ns>/ of commit-mode runs (bisect/gitcopy.py)
        if checkouts.is_dir() and not checkouts.is_symlink():
            for e in checkouts.iterdir():
                pid = e.name.split("-", 1)[0]
                if not (pid.isdigit() and pid_alive(int(pid))):
                    self._remove(e, out, "other")
        return out


def pid_alive(pid: int) -> bool:
    """Whether a process runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_use(d: Path) -> bool:
    try:
        st = d.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and not (d / "result.json").exists() and time.time() - st.st_mtime < IN_USE_S


def tree_size(path: Path) -> int:
    """Bytes under `path` (lstat: links are not followed)."""
    total = 0
    try:
        total = path.lstat().st_size
    except OSError:
        return 0
    if path.is_dir() and not path.is_symlink():
        for dirpath, _dirs, files in os.walk(path):  # followlinks=False
            for name in files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    pass
    return total


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


def prune_after_run(project: Any) -> Pruned:
    """What a command calls when its run is done: keep the project's
    `[state] keep_runs` runs and `keep_trials` trial dirs (the cache stays)."""
    st = project.manifest.state
    return StateDir.of(project.root).prune(st.keep_runs, st.keep_trials)


def clean_project(path: str | Path, *, everything: bool = False) -> Pruned:
    """The body of `tfrepro clean [PATH] [--all]`: the project's state dir
    pruned to its `[state]` settings, every trial copy and scratch dir
    removed; `everything`: the whole `.tfrepro/`. Reads only the manifest, so
    it works on a project whose markers are broken."""
    from tfrepro.manifest import Manifest
    from tfrepro.projectfiles import MANIFEST, find_root

    p = Path(path)
    root = find_root(p) if p.is_file() else p.resolve()
    manifest = root / MANIFEST
    settings = Manifest().state
    if manifest.is_file():
        settings = Manifest.parse(manifest.read_bytes().decode("utf-8", errors="replace"), str(manifest)).state
    return StateDir.of(root).clean(settings.keep_runs, settings.keep_trials, everything=everything)
