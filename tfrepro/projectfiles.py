"""The file-system edge of a project: which files belong to it, how a
variant gets its own copy of them, and how `features --set` writes back.

Three promises live here (issue 13):

- **Nothing of the user's is copied that is not the project's.** A project
  never includes credential stores (`.ssh`, `.aws`, `.netrc`, ...),
  virtualenvs (any directory holding `pyvenv.cfg` or `conda-meta`), tool
  caches, or special files (FIFOs, sockets, devices: reading a FIFO blocks
  forever). A dangling symlink is skipped with a warning. A script given by
  path belongs to the nearest enclosing project (`find_root`), never to `$HOME`
  or `/` as a whole.
- **No trial write reaches a user file.** A variant never links to a user
  file: each file is reflinked (a copy-on-write clone, `ioctl FICLONE`, on
  btrfs/XFS/...) or copied. Copies count against a budget per variant
  (`[state] copy_budget_mb`, default 2048); a file that would exceed it stops
  the trial before it starts, naming the file and the setting to raise.
  Symlinks, hard links and read-only bits are all unsafe against a script
  that opens the file for writing, so none of them is used.
- **`features --set` writes through links, byte for byte.** `write_in_place`
  writes the link's target (a symlinked `.py` stays a symlink, a hard link
  keeps its inode, so every name sees the change).
"""

from __future__ import annotations

import ast
import errno
import fcntl
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tfrepro.errors import UserError

log = logging.getLogger("tfrepro")

MANIFEST = "tfrepro.toml"
STATE_DIR = ".tfrepro"
# Directories never part of a project (state, VCS, environments, caches).
EXCLUDED_DIRS = frozenset(
    f"{STATE_DIR} .git __pycache__ .venv venv env .tox .nox node_modules .mypy_cache .pytest_cache .ruff_cache"
    " .hypothesis build dist .ipynb_checkpoints".split()
)
# Credential stores: never copied into a trial, wherever they sit in the tree.
CREDENTIAL_DIRS = frozenset(".ssh .aws .gnupg .kaggle .azure .kube .password-store .pki .terraform.d".split())
CREDENTIAL_FILES = frozenset(
    ".netrc _netrc .git-credentials .pypirc .pgpass .npmrc .boto .s3cfg .dockercfg credentials.db access_tokens.db"
    " application_default_credentials.json".split()
)
# Credential paths below a directory (relative to any directory of the tree).
CREDENTIAL_PATHS = frozenset({".config/gcloud", ".docker/config.json", ".config/gh/hosts.yml"})
# Marks of a virtual environment (venv / virtualenv, conda).
ENV_MARKS = ("pyvenv.cfg", "conda-meta")
# A directory holding one of these is a project root (nearest one wins).
ROOT_MARKS = ("tfrepro.toml", ".git", "pyproject.toml")

FICLONE = getattr(fcntl, "FICLONE", 0x40049409)  # linux/fs.h: _IOW(0x94, 9, int)
# errno of an ioctl(FICLONE) the file system (or the kernel) cannot do
_NO_REFLINK = (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EBADF, errno.EPERM)
# What a file that is not a regular one is, by its type bits (a warning says it).
_SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


# -- which files ----------------------------------------------------------------


def _is_credential(rel_posix: str) -> bool:
    parts = rel_posix.split("/")
    if parts[-1] in CREDENTIAL_FILES or not CREDENTIAL_DIRS.isdisjoint(parts):
        return True
    return any(f"/{c}/" in f"/{rel_posix}/" for c in CREDENTIAL_PATHS)  # c, whole segments, anywhere


def iter_project_files(root: Path, skipped: list[str] | None = None) -> Iterator[Path]:
    """Every file of the project, relative to root, sorted, exclusions applied.

    Regular files and symlinks to regular files only. Special files and
    dangling symlinks are skipped with a warning (logged to the `tfrepro`
    logger, and appended to `skipped` when given); credential stores and
    virtualenvs are skipped silently: they are never part of a project.
    """

    def note(rel: Path, why: str) -> None:
        msg = f"{rel.as_posix()}: {why}, not copied into trials"
        log.warning("warning: %s", msg)
        if skipped is not None:
            skipped.append(msg)

    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root)
        keep = []
        for d in sorted(dirnames):
            rel = (rel_dir / d).as_posix()
            if d in EXCLUDED_DIRS or d.endswith(".egg-info") or _is_credential(rel):
                continue
            if any((here / d / m).exists() for m in ENV_MARKS):  # a virtualenv
                continue
            if (here / d).is_symlink():  # os.walk does not follow it: say so (a trial reading it would fail)
                note(Path(rel), f"a symlink to the directory {os.readlink(here / d)} (read it by its absolute path)")
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = rel_dir / name
            if _is_credential(rel.as_posix()):
                continue
            full = here / name
            try:
                st = full.stat()  # follows symlinks
            except OSError:
                note(rel, "a dangling symlink" if full.is_symlink() else "unreadable")
                continue
            if not stat.S_ISREG(st.st_mode):
                note(rel, _SPECIAL.get(stat.S_IFMT(st.st_mode), "not a regular file"))
                continue
            yield rel


def protected_dirs() -> set[Path]:
    """`$HOME` and `/`: never a project (they hold far more than one)."""
    home = os.environ.get("HOME")
    return {Path("/"), Path(home).resolve()} if home else {Path("/")}


def find_root(script: Path) -> Path:
    """The project a script belongs to: the nearest ancestor holding
    `tfrepro.toml`, `.git` or `pyproject.toml`, else the script's directory.
    Never `$HOME` or `/` (they hold far more than a project): a script directly
    there is a UserError asking to move it into a folder of its own."""
    start = script.resolve().parent
    protected = protected_dirs()
    for d in (start, *start.parents):
        if d in protected:
            break
        if any((d / m).exists() for m in ROOT_MARKS):
            return d
    if start in protected:
        raise UserError(
            f"{script.name} sits directly in {'your home directory' if start != Path('/') else '/'}, "
            "and tfrepro would copy that whole directory into every trial",
            path=script,
            hint="move the script (and the files it reads) into a folder of its own, "
            "e.g. mkdir ~/repro && mv train.py ~/repro/",
        )
    return start


# -- variants: copy-on-write or copy, never a link ------------------------------


@dataclass
class FileNote:
    """How a variant got its files (`asdict` of it: `TrialResult.extra["files"]`)."""

    copied: int = 0
    copied_bytes: int = 0
    reflinked: list[str] = field(default_factory=list)
    rendered: int = 0


def copy_file(src: Path, dest: Path, rel: str, note: FileNote, budget: int) -> None:
    """Give the variant its own `dest` for `src`: a reflink (a clone sharing
    its blocks copy-on-write) where the file system can make one, else a copy
    within `budget` bytes of copies per variant, else a UserError."""
    size = src.stat().st_size
    if size > 64 * 1024:
        with open(src, "rb") as fi, open(dest, "xb") as fo:
            try:
                fcntl.ioctl(fo.fileno(), FICLONE, fi.fileno())
            except OSError as e:
                if e.errno not in _NO_REFLINK:
                    raise
                dest.unlink()  # still open: fine on POSIX
        if dest.exists():  # cloned
            shutil.copystat(src, dest)
            note.reflinked.append(rel)
            return
    if note.copied_bytes + size > budget:
        raise UserError(
            f"{rel} ({size / 2**20:.0f} MB) does not fit the copy budget of a trial "
            f"({budget / 2**20:.0f} MB per variant, {note.copied_bytes / 2**20:.0f} MB used): every trial "
            "runs on its own copy of the project, so that nothing it writes reaches your files",
            path=src,
            hint="raise `[state] copy_budget_mb` in tfrepro.toml, or keep large data outside the project "
            "directory and read it by absolute path (this file system cannot make copy-on-write clones)",
        )
    shutil.copy2(src, dest, follow_symlinks=True)
    note.copied += 1
    note.copied_bytes += size


# -- features --set: write through links ------------------------------------------


def write_in_place(path: Path, data: bytes) -> None:
    """Replace the bytes of the file `path` names, as the user's editor would.

    - `path` a symlink: the target is written, the link stays.
    - hard-linked (st_nlink > 1): written in place (same inode), so every name
      sees the new content. A copy of the old bytes is kept next to it as
      `.<name>.tfrepro-backup` until the write is complete and synced; after a
      crash in between, that file holds the original.
    - otherwise: the new content goes to a temp file in the same directory
      (mode copied), synced and renamed over the file: atomic.
    """
    target = Path(os.path.realpath(path))
    st = target.stat()
    if st.st_nlink > 1:
        backup = target.with_name(f".{target.name}.tfrepro-backup")
        shutil.copyfile(target, backup)
        with open(target, "r+b") as f:
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
        backup.unlink()
        return
    atomic_write(target, data, mode=stat.S_IMODE(st.st_mode), prefix=f".{target.name}.", suffix=".tfrepro-tmp")


def atomic_write(
    path: Path, data: bytes, *, mode: int | None = None, prefix: str | None = None, suffix: str = ".tmp"
) -> None:
    """`data` into a temp file beside `path` (`prefix`, default its name and a
    dot; `suffix`), synced, given the permission bits `mode`, then renamed
    over `path`: atomic. Its directory is created when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or path.name + ".", suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the files a script needs --------------------------------------------------


def imported_files(root: Path, start: Iterable[str], files: Iterable[str]) -> list[str]:
    """`start` and every project file they import, transitively (relpaths)."""
    known = set(files)
    seen: list[str] = []
    todo = list(start)
    while todo:
        rel = todo.pop(0)
        if rel in seen or rel not in known:
            continue
        seen.append(rel)
        try:
            tree = ast.parse((root / rel).read_bytes())  # a BOM, a coding line: as Python reads it
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue  # annotate reports it (a syntax error is bad input)
        mods: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level <= 1:  # level > 1: beyond the script's directory, rare
                prefix = f"{node.module}." if node.module else ""
                mods += ([node.module] if node.module else []) + [prefix + a.name for a in node.names]
        for mod in mods:
            for base in {Path(rel).parent, Path(".")}:
                p = (base / mod.replace(".", "/")).as_posix()
                todo += [c for c in (f"{p}.py", f"{p}/__init__.py") if c in known and c not in seen]
    return seen
