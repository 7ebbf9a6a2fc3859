"""Temporary dirs that outlive a killed owner only until the next run (EDGE).

A warm server's socket dir lives in the system temp dir. Its owner removes
it on close; a tfrepro killed with SIGKILL cannot. So the owner holds an
flock on `owner.lock` inside the dir for as long as it lives (the kernel
drops it when the process dies, however it dies), and the next process that
makes one sweeps the dirs of its prefix whose lock it can take: their owner
is gone. A dir without `owner.lock` (being made, or made by an older
tfrepro) is never touched.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

LOCK = "owner.lock"


def make(prefix: str, root: str | None = None) -> tuple[str, int]:
    """A new dir under `root` (the system temp dir) and the fd of its held
    lock: close the fd after removing the dir. The stale dirs of `prefix`
    are swept first."""
    sweep(prefix, root)
    path = tempfile.mkdtemp(prefix=prefix, dir=root)
    fd = os.open(os.path.join(path, LOCK + ".new"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(os.path.join(path, LOCK + ".new"), os.path.join(path, LOCK))  # visible only once held
    return path, fd


def sweep(prefix: str, root: str | None = None) -> list[str]:
    """Remove this user's dirs of `prefix` whose owner is dead; -> what was removed."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    for d in base.glob(prefix + "*"):
        try:
            if d.is_symlink() or not d.is_dir() or d.stat().st_uid != os.getuid():
                continue
            fd = os.open(d / LOCK, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # no lock file: being made, or not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # held: its owner is alive
            continue
        shutil.rmtree(d, ignore_errors=True)
        os.close(fd)
        removed.append(str(d))
    return removed
