"""Dirs that outlive a killed owner only until someone looks (EDGE): the one
rule for whether a dir's owner still lives.

The owner holds an flock on a lock file inside the dir while the dir is in
use (the kernel drops it when the process dies, however it dies): held, in
use; free, its owner is gone (a pid in a name can be reused: not proof). The
lock file appears only once held; a dir without it is never judged. Users:
`state.MARK` (trial, run and checkout dirs: pruning skips held ones) and the
system temp dir's warm-server, Ray-task, private Ray instance and test-cache
dirs, which the next `make` of their prefix sweeps.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
