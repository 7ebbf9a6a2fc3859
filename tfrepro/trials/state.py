"""The one owner of a project's state directory, `.tfrepro/`.

Every directory and file tfrepro creates under it goes through `StateDir`:
run dirs, trial dirs, cache entries, commit checkouts. That is how
the invariant "invisible to `git status`" holds in every mode: `ensure()`
writes `.tfrepro/.gitignore` (holding `*`, as pytest does for its cache)
before anything else is created, and there is no second way to create a path
under it (tests/test_git_status_e2e.py checks `git status` after every
command that makes one).

Layout:
    .gitignore
    cache/<key>.json                  one finished trial (atomic writes)
    trials/<key[:16]>-<random>/       one trial: variant/, trial.json, result.json (and .progress:
                                      the steps so far, what a timeout keeps), stdout.log, stderr.log
    runs/<id>/                        one bisect: result.json, trials/<n>-.../
    checkouts/<pid>-<ns>/<sha>/       commit mode's read-only copies
    tmp/                              scratch of older versions (nothing makes it now; clean prunes it)

Pruning (`prune`, `clean`) deletes only below this directory and never
follows a symlink: a link is removed as a link, its target untouched. A
`.tfrepro` (or one of its `runs/`, `trials/`...) that is a symlink or not a
directory is refused (exit 2, `StateDirError`), never written through.

Records: every directory tfrepro makes here holds a `MARK` file
(`.tfrepro-made`), and pruning deletes only marked directories, cache
entries named `<hex>.json`, and the state dir's own `.gitignore`; anything
else found here is left alone and counted (`Pruned.foreign`). The mark is
also the directory's lock (`hold`, `in_use`: the one rule for whether a
dir's owner lives, below): the process that made it holds an `flock` on it while the
directory is in use (a trial until its result is stored, a run until the
process ends, a commit-mode run's checkouts until it ends), and pruning,
`clean --all` included, skips a locked directory. A trial dir whose mark is gone when its trial ends (removed under
it) gives a could-not-run result, never cached (`runner.cached`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfrepro.errors import UserError
from tfrepro.projectfiles import STATE_DIR, atomic_write
from tfrepro.trials.values import TrialResult, summary

STATE_DIR_NAME = STATE_DIR  # the name is the project layout's (projectfiles excludes it from variants)
GITIGNORE = "# created by tfrepro: nothing in here belongs in git\n*\n"
LOGS = ("stdout.log", "stderr.log")
_TRIAL_REF = re.compile(r"trials[/\\]+([0-9a-f]{16}-[A-Za-z0-9_]+)")
MARK = ".tfrepro-made"  # in every dir tfrepro makes here: its record and its lock
_CACHE_NAME = re.compile(r"[0-9a-f]{8,}\.json(\.[A-Za-z0-9_]+\.tmp)?")
_LAYOUT = ("cache", "trials", "runs", "checkouts", "tmp")
_HELD: dict[str, int] = {}  # dir -> fd of its MARK, locked by this process


class StateDirError(UserError):
    """`.tfrepro` (or a dir inside it) is a symlink or not a directory."""


@dataclass
class Pruned:
    """What `prune` / `clean` removed."""

    runs: int = 0
    trials: int = 0
    variants: int = 0
    other: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # left alone: no record of ours
    busy: int = 0  # skipped: in use by a running tfrepro

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("runs", "trials", "variants", "other", "bytes")}

    def describe(self) -> str:
        text = "nothing to remove"
        if self.paths:
            text = (
                f"removed {self.runs} runs, {self.trials} trials, {self.variants} trial copies and "
                f"{self.other} scratch dirs: {self.bytes / 2**20:.1f} MB freed"
            )
        if self.busy:
            text += f"; kept {self.busy} in use by a running tfrepro"
        if self.foreign:
            text += f"; left {len(self.foreign)} entries tfrepro has no record of writing (e.g. {self.foreign[0]})"
        return text


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
    def check(self) -> None:
        """Refuse a state dir that is a symlink or not a directory (exit 2)."""
        _check_dir(self.path, "the state directory")

    def ensure(self) -> Path:
        """Create the state dir if needed, and always its `.gitignore` (also in
        a dir that some older version or a `mkdir -p` created without one)."""
        self.check()
        self.path.mkdir(parents=True, exist_ok=True)
        self.check()  # made by someone else between the check and the mkdir
        ignore = self.path / ".gitignore"
        if not ignore.is_file():
            atomic_write(ignore, GITIGNORE.encode())
        return self.path

    def sub(self, *parts: str) -> Path:
        """A directory below the state dir, created (never through a link)."""
        d = self.ensure()
        for part in parts:
            d = d / part
            _check_dir(d, f"{d.relative_to(self.path.parent)}")
            d.mkdir(exist_ok=True)
        return d

    def make_dir(self, path: Path) -> Path:
        """`path` (below the state dir, not there yet) created, marked and held
        (a path elsewhere: ValueError, from `relative_to`)."""
        self.sub(*path.parent.relative_to(self.path).parts)
        path.mkdir()
        _HELD[str(path)] = hold(path, MARK)
        return path

    # -- trials and the cache ----------------------------------------------
    def new_trial_dir(self, key: str) -> Path:
        """A new, unique directory under `trials/`: marked as ours and locked
        by this process until `release` (or its exit)."""
        d = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=self.sub("trials")))
        _HELD[str(d)] = hold(d, MARK)
        return d

    @staticmethod
    def release(trial_dir: Path) -> None:
        """The trial in `trial_dir` is over: pruning may remove the dir now."""
        fd = _HELD.pop(str(trial_dir), None)
        if fd is not None:
            os.close(fd)

    def drop_variant(self, trial_dir: Path) -> None:
        """Remove a finished trial's `variant/` (its copy of the project):
        the result and the logs stay. `TFREPRO_KEEP_VARIANTS=1` keeps it."""
        if os.environ.get("TFREPRO_KEEP_VARIANTS") == "1" or self.path not in Path(trial_dir).parents:
            return
        shutil.rmtree(Path(trial_dir) / "variant", ignore_errors=True)

    @staticmethod
    def intact(trial_dir: Path) -> bool:
        """Whether `trial_dir` is still the dir this process made (its mark
        not removed or replaced under it while its trial ran; `new_trial_dir` holds it)."""
        try:
            st = os.lstat(Path(trial_dir) / MARK)
        except OSError:
            return False
        held = os.fstat(_HELD[str(trial_dir)])
        return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)

    def cache_file(self, key: str) -> Path:
        return self.path / "cache" / f"{key}.json"

    def store(self, key: str, result: TrialResult) -> None:
        """Cache a finished trial. A could-not-run result is never cached."""
        if result.could_not_run:
            return
        self.sub("cache")
        atomic_write(
            self.cache_file(key), json.dumps(result.to_dict(), indent=1, allow_nan=False, default=str).encode()
        )

    # -- runs --------------------------------------------------------------
    def new_run_dir(self, run_id: str | None = None) -> Path:
        """`runs/<id>` (default: local time), `-2`, `-3`... when taken; created
        with its `trials/` subdirectory."""
        base = self.sub("runs")
        stamp = run_id or time.strftime("%Y%m%d-%H%M%S")
        for n in range(1, 1000):
            d = base / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                self.make_dir(d)  # in use until this process ends
            except FileExistsError:
                continue
            (d / "trials").mkdir()
            return d
        raise FileExistsError(f"cannot create a run directory under {base}")

    # -- pruning -------------------------------------------------------------
    def _children(self, name: str, out: Pruned) -> list[Path]:
        """The marked entries of `runs/`, `trials/`, ... oldest first; none
        when that dir is missing or a symlink (never followed out of the state
        dir). Entries without our mark are counted in `out.foreign`."""
        base = self.path / name
        if not base.is_dir() or base.is_symlink():
            return []
        entries = []
        for e in os.scandir(base):
            if ours(Path(e.path)):
                entries.append((e.stat(follow_symlinks=False).st_mtime, e.name, Path(e.path)))
            elif not e.name.endswith(".index"):  # a checkout's private index (gitcopy)
                out.foreign.append(e.path)
        return [p for _, _, p in sorted(entries)]

    def _remove(self, path: Path, out: Pruned, kind: str) -> None:
        if self.path not in path.parents:  # pragma: no cover - a bug, not an input
            raise ValueError(f"refusing to delete {path}: not below {self.path}")
        try:
            st = path.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode) and in_use(path, MARK):
            out.busy += 1
            return
        size = tree_size(path)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path, ignore_errors=True)  # unlinks symlinks inside, never follows them
        else:
            path.unlink(missing_ok=True)
        setattr(out, kind, getattr(out, kind) + 1)
        out.bytes += size
        out.paths.append(str(path))

    def prune(
        self, keep_runs: int, keep_trials: int, *, variants: bool = False, keep_bytes: int | None = None
    ) -> Pruned:
        """Keep the newest `keep_runs` runs and `keep_trials` trial dirs.

        Older runs go whole. An older trial dir goes whole, unless a kept run
        refers to it (its summary's `log_dir`): then only its `variant/` goes
        (the logs stay). With `variants`, every trial dir's `variant/` goes.
        The cache is never touched; dirs in use or not ours are skipped."""
        self.check()
        out = Pruned()
        runs = [d for d in self._children("runs", out) if not in_use(d, MARK)]
        cut = max(0, len(runs) - keep_runs)
        for d in runs[:cut]:
            self._remove(d, out, "runs")
        referenced: set[str] = set()
        for d in runs[cut:]:
            for f in d.rglob("*.json"):
                if not f.is_symlink():
                    referenced.update(_TRIAL_REF.findall(f.read_text(encoding="utf-8", errors="replace")))
        trials = self._children("trials", out)
        out.busy += sum(1 for d in trials if in_use(d, MARK))
        trials = [d for d in trials if not in_use(d, MARK)]
        cut = max(0, len(trials) - keep_trials)
        if keep_bytes is not None:  # by size as well as count: the oldest go until the rest fits
            sizes = [tree_size(d) for d in trials]
            while cut < len(trials) and sum(sizes[cut:]) > keep_bytes:
                cut += 1
        for i, d in enumerate(trials):
            if i < cut and d.name not in referenced:
                self._remove(d, out, "trials")
            elif i < cut or variants:
                self._remove(d / "variant", out, "variants")
        return out

    def clean(self, keep_runs: int, keep_trials: int, *, everything: bool = False) -> Pruned:
        """`tfrepro clean`: `prune` plus every trial's `variant/`, `tmp/` and
        checkouts of runs that are gone; with `everything`, all that tfrepro
        wrote here (cache included), the dir itself when nothing else is left.
        Never what is in use, never what has no record of ours."""
        if not self.path.exists() and not self.path.is_symlink():
            return Pruned()
        self.check()
        if everything:
            return self._clean_all()
        out = self.prune(keep_runs, keep_trials, variants=True)
        for e in self._children("tmp", out):
            self._remove(e, out, "other")
        return self.sweep_checkouts(out)

    def sweep_checkouts(self, out: Pruned | None = None) -> Pruned:
        """Remove the checkouts of commit-mode runs that are over
        (bisect/gitcopy.py; a running one holds its lock, a killed one's is free)."""
        out = out or Pruned()
        for e in self._children("checkouts", out):
            self._remove(e, out, "other")
        return out

    def _clean_all(self) -> Pruned:
        out = Pruned()
        for e in sorted(self.path.iterdir()):
            if e.name in _LAYOUT and e.is_dir() and not e.is_symlink():
                cache = e.name == "cache"  # its entries are ours by their name, not a mark
                for f in e.iterdir() if cache else self._children(e.name, out):
                    if cache and not (_CACHE_NAME.fullmatch(f.name) and not f.is_dir()):
                        out.foreign.append(str(f))
                    else:
                        self._remove(f, out, "other")
                with contextlib.suppress(OSError):  # when empty
                    e.rmdir()
            elif e.name != ".gitignore":
                out.foreign.append(str(e))
        ignore = self.path / ".gitignore"
        text = None
        with contextlib.suppress(OSError, ValueError):
            text = ignore.read_text(encoding="utf-8")
        if [p.name for p in self.path.iterdir()] == [".gitignore"] and text == GITIGNORE:
            ignore.unlink()
        with contextlib.suppress(OSError):  # when empty
            self.path.rmdir()
            out.paths.append(str(self.path))
        return out


def _check_dir(path: Path, what: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise StateDirError(
            f"{what} is a symbolic link (to {os.readlink(path)}): tfrepro keeps its state in a directory "
            "of its own and never writes or deletes through a link",
            path=path,
            hint=f"remove the link (`rm {path}`: its target is left as it is) and run again",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(
            f"{what} is not a directory: tfrepro keeps its state in a directory of that name",
            path=path,
            hint=f"move or remove {path} and run again",
        )


# -- dirs that outlive a killed owner only until someone looks (EDGE) ------------------
# The owner holds an flock on a lock file inside the dir while the dir is in
# use (the kernel drops it when the process dies, however it dies): held, in
# use; free, its owner is gone (a pid in a name can be reused: not proof). The
# lock file appears only once held; a dir without it is never judged. Users:
# `MARK` (trial, run and checkout dirs: pruning skips held ones) and the
# system temp dir's warm-server, Ray-task, private Ray instance and test-cache
# dirs, which the next `make` of their prefix sweeps.

LOCK = "owner.lock"


def hold(d: str | Path, name: str = LOCK) -> int:
    """Create the lock file `d/name` (holding this process's pid), locked by
    this process, and return its fd: closing it (or dying) lets go."""
    # a name of its own: one left by a holder killed before its rename never blocks the next
    fd, new = tempfile.mkstemp(prefix=name + ".", suffix=".new", dir=d)
    os.write(fd, f"{os.getpid()}\n".encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(new, os.path.join(d, name))  # visible only once held
    return fd


def in_use(d: str | Path, name: str = LOCK) -> bool | None:
    """Whether a live process (this one included) holds `d`'s lock; None
    when `d` has no lock file `name` (being made, or not ours to judge)."""
    try:
        fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held (or cannot tell: kept)
    finally:
        os.close(fd)
    return False


def make(prefix: str, root: str | None = None) -> tuple[str, int]:
    """A new dir under `root` (the system temp dir) and the fd of its held
    lock: close the fd after removing the dir. The stale dirs of `prefix`
    are swept first."""
    sweep(prefix, root)
    path = tempfile.mkdtemp(prefix=prefix, dir=root)
    return path, hold(path)


@contextlib.contextmanager
def owned(prefix: str, root: str | None = None) -> Iterator[str]:
    """`make`'s dir for the block: removed and let go at its end; swept by
    the next `make` of `prefix` when this process is killed in it."""
    path, fd = make(prefix, root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def sweep(prefix: str, root: str | None = None) -> list[str]:
    """Remove this user's dirs of `prefix` whose owner is dead; -> what was removed."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(prefix + "*"):
        try:
            if d.is_symlink() or not d.is_dir() or d.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if in_use(d) is False:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


def ours(d: Path) -> bool:
    """Whether `d` is a real dir that tfrepro made (it holds our mark)."""
    try:
        return stat.S_ISDIR(d.lstat().st_mode) and stat.S_ISREG(os.lstat(d / MARK).st_mode)
    except OSError:
        return False


def tree_size(path: Path) -> int:
    """Bytes under `path` (lstat: links are not followed)."""
    try:
        total = path.lstat().st_size
    except OSError:
        return 0
    if path.is_dir() and not path.is_symlink():
        for dirpath, _dirs, files in os.walk(path):  # followlinks=False
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def shown_path(p: Path) -> str:
    """A run dir as the answer shows it: relative to the current directory when below it."""
    rel = os.path.relpath(p, Path.cwd())
    return rel if not rel.startswith("..") else str(p)


def write_trial_record(dest: Path, result: TrialResult) -> None:
    """One trial of a run, in the run dir: its summary and its logs (hard
    links when possible: the logs already live in the trial dir)."""
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write(dest / "summary.json", json.dumps(summary(result), indent=1, default=str).encode())
    if not result.log_dir:
        return
    for name in LOGS:
        src = Path(result.log_dir) / name
        if src.is_file():
            try:
                os.link(src, dest / name)
            except OSError:
                shutil.copyfile(src, dest / name)


def prune_after_run(project: Any) -> Pruned:
    """What a command calls when its run is done: keep the project's
    `[state] keep_runs` runs and `keep_trials` trial dirs (the cache stays)."""
    st = project.manifest.state
    state = StateDir.of(project.root)
    for held in [d for d in _HELD if Path(d).parent == state.path / "runs"]:
        state.release(Path(held))  # this command's runs are over
    return state.prune(st.keep_runs, st.keep_trials, keep_bytes=int(st.keep_mb * 2**20))


def clean_project(path: str | Path, *, everything: bool = False) -> Pruned:
    """The body of `tfrepro clean [PATH] [--all]`: the project's state dir
    pruned to its `[state]` settings, every trial copy and scratch dir
    removed; `everything`: the whole `.tfrepro/`. The project and its
    manifest are found and read as every command finds them
    (`project.locate`, `project.read_manifest`); only the manifest is
    read, so it works on a project whose markers are broken."""
    from tfrepro.project import locate, read_manifest

    root = locate(path)[0]
    settings = read_manifest(root)[1].state
    return StateDir.of(root).clean(settings.keep_runs, settings.keep_trials, everything=everything)
