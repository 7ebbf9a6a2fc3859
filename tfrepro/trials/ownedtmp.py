"""Directories that outlive a killed owner only until someone looks (EDGE):
the one rule for whether a dir's owner still lives.

The owner of a dir holds an flock on a lock file inside it for as long as
the dir is in use (the kernel drops it when the process dies, however it
dies). Whoever finds such a dir judges it by that lock alone: held, in use
(by another process or this one); free, its owner is gone. A pid in a dir's
name is no such proof: it may be reused by an unrelated process, and a dir
would then be kept forever. The lock file appears only once it is held, so a
dir being made is never judged free; a dir without it (being made, or not
ours) is never judged at all.

Users: the state dir's records (`state.MARK` in every trial, run and
checkout dir, which pruning and the next commit-mode run skip while held),
and dirs in the system temp dir that a SIGKILLed owner cannot remove (a
warm server's socket dir, a Ray task's scratch dir, the test session's user
cache): the next process that makes one of the same prefix sweeps them.
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
    new = os.path.join(d, name + ".new")
    fd = os.open(new, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
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
