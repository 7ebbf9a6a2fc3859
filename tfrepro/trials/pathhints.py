"""Why a file a trial reads is missing from its copy: the hint a crash gets.

A trial runs in a copy of the project under `.tfrepro/trials/.../variant/`.
Two kinds of reads that work in the project fail there, silently from the
user's side: a path through a symlinked directory (`data -> /mnt/data`: a
variant never links to a user's files, so the link is not copied), and a
relative path out of the project (`../shared_data/x.csv`: relative to the
copy, that is somewhere under `.tfrepro/`). The hint says which, and the fix.
A third: a git-lfs pointer file read as data (commit mode never downloads LFS
objects, and a clone without `git lfs pull` holds only pointers).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

# `FileNotFoundError: [Errno 2] No such file or directory: 'x'`, tf.io's
# `NotFoundError: x; No such file or directory`, `No such file: x`.
_MISSING = (
    re.compile(r"No such file or directory: ['\"]([^'\"]+)['\"]"),
    re.compile(r"NotFoundError[^:]*: ([^;\s]+); No such file"),
    re.compile(r"(?:not found|No such file)[:]? ['\"]?([^'\"\s;]+)"),
)


def missing_path_hint(error: str | None, root: Path) -> str | None:
    """The hint for a crash whose error names a missing path, or None."""
    path = next((m.group(1) for p in _MISSING if (m := p.search(error or ""))), None)
    if not path or os.path.isabs(path):
        return None
    parts = Path(path).parts
    if parts and parts[0] == "..":
        return (
            f"{path} is outside the project directory: a trial runs in a copy of the project under .tfrepro/, "
            f"where it is not; give the script an absolute path ({(Path(root) / path).resolve()}) or move the "
            "data into the project"
        )
    for n in range(1, len(parts)):
        prefix = Path(root, *parts[:n])
        if prefix.is_symlink() and prefix.is_dir():
            rel = Path(*parts[:n]).as_posix()
            return (
                f"{rel} is a symlink to the directory {os.readlink(prefix)}, which trials do not get (a trial's "
                f"copy never links to your files); read it by its absolute path ({prefix.resolve()}/...) or make "
                f"{rel} a real directory in the project"
            )
    return None


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def lfs_pointer_hint(root: Path, files: list[str], limit: int = 1024) -> str | None:
    """The hint for a crash in a project holding git-lfs pointer files."""
    pointers = []
    for rel in files:
        p = Path(root) / rel
        with contextlib.suppress(OSError):
            if p.stat().st_size <= limit and p.read_bytes().startswith(LFS_POINTER):
                pointers.append(rel)
    if not pointers:
        return None
    more = f" and {len(pointers) - 1} more" if len(pointers) > 1 else ""
    return (
        f"{pointers[0]}{more} is a git-lfs pointer file, not its data (tfrepro never downloads LFS objects): "
        "if the script reads it, run `git lfs pull` in the project, or give the data by an absolute path"
    )
