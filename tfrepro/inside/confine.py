"""Kernel confinement from inside a trial process (stdlib only, never imports tfrepro).

The parent (`tfrepro/trials/confine.py`) decides the mechanism and the plan;
this module applies it to the calling process, which must be single-threaded
(a child just forked from the warm server, or the cold launcher before it
starts the command). Two mechanisms, both unprivileged:

- "overlay": a new user, mount and PID namespace. Every directory of the plan
  (`overlay`: the writable parts of the file system, each one without
  submounts) gets an overlay whose upper layer is a fresh tmpfs, so whatever
  the trial writes there lands in that tmpfs and vanishes with the trial; the
  trial dir (`writable`) is bound back on top, writable for real; /dev/shm is
  a fresh tmpfs; /proc shows the new PID namespace. `enter_overlay` forks:
  the caller goes on as PID 2 of the namespace (`python script.py` under
  bwrap's init is PID 2 too), PID 1 reaps and hands the status up, and when
  the trial ends the kernel kills every process left in the namespace
  (setsid daemons included). The process that called it waits and exits as
  the trial did. This is what bubblewrap does for a cold trial
  (`--overlay-src D --tmp-overlay D`, `--unshare-pid`), with the same plan.
- "landlock": writes (create, write, truncate, remove, rename, link) outside
  the `writable` dirs (and /dev, /proc) fail with EACCES; reads are free.

`python -I -S confine.py --probe PLAN_JSON` tries a plan and prints "ok".
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import json
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
CANNOT_CONFINE = 71  # the trial never started: confinement could not be set up
MARK = "tfrepro: cannot confine the trial: "


@functools.cache
def libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _mount(src, target, fstype, flags, data=None) -> None:
    enc = [None if x is None else os.fsencode(x) for x in (src, target, fstype, data)]
    _check(libc().mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


# -- overlay --------------------------------------------------------------------------


def _layers(plan: dict) -> None:
    """The overlays, then the trial dirs bound back on top (open_tree would do
    without the O_PATH descriptors; these work on every kernel with
    unprivileged overlayfs, 5.11+). `host`: where the real file system is
    bound in a confined warm server (whose own view is overlaid): every
    lower layer and every trial dir is taken from there, so a child sees
    what a cold trial sees, not what the server wrote."""
    host = plan.get("host")
    hfd = os.open(host, os.O_PATH | os.O_DIRECTORY) if host else -1  # the path goes under the /tmp overlay

    def real(path: str) -> str:
        return f"/proc/self/fd/{hfd}{path}" if host else path

    keep = [(path, os.open(real(path), os.O_PATH | os.O_DIRECTORY)) for path in plan["writable"]]
    scratch = real(plan["scratch"])
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    sfd = os.open(scratch, os.O_PATH | os.O_DIRECTORY)
    for i in range(len(plan["overlay"])):  # all before the first overlay hides `scratch`
        for part in ("u", "w"):
            os.mkdir(os.path.join(scratch, f"{part}{i}"))
    for i, path in enumerate(plan["overlay"]):
        opts = f"lowerdir={real(path)},upperdir=/proc/self/fd/{sfd}/u{i},workdir=/proc/self/fd/{sfd}/w{i},userxattr"
        _mount("overlay", path, "overlay", 0, opts)
    for path, fd in keep:
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
        os.close(fd)
    os.close(sfd)
    if host:
        libc().umount2(os.fsencode(host), 2)  # MNT_DETACH; hidden under an overlay already, mostly
        os.close(hfd)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def real_path(spec: dict | None, path: str) -> str:
    """`path` of the real file system, from a confined warm server's view."""
    host = ((spec or {}).get("host") or "").rstrip("/")
    return host + path if host and path else path


def exit_as(status: int) -> None:
    """Exit as a process with wait status `status` did (a signal: die of it)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _pdeathsig() -> None:
    libc().prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _wait(trial: int) -> int | None:
    """The wait status of the child `trial`, every other child reaped on the
    way (None: no child left; an interrupted wait is retried by Python)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        if pid == trial:
            return status


def enter_overlay(plan: dict) -> None:
    """Confine the calling (single-threaded) process; returns in PID 2 of the
    new namespace, never in the caller, which exits as the trial does."""
    uid, gid = os.getuid(), os.getgid()
    _check(libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:  # one write(2), at close
            f.write(text)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    r, w = os.pipe()
    init = os.fork()
    if init:  # the original process: outside the namespace, waits and mirrors
        os.close(w)
        _, st = os.waitpid(init, 0)
        data = os.read(r, 64)
        exit_as(int(data) if data else st)
    os.close(r)
    try:
        _pdeathsig()
        _layers(plan)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        trial = os.fork()
    except BaseException as e:
        sys.stderr.write(f"{MARK}{e}\n")
        sys.stderr.flush()
        os.write(w, str(CANNOT_CONFINE << 8).encode())
        os._exit(0)
    if trial:  # PID 1 of the namespace: reap everything, hand the trial's status up
        os.write(w, str(_wait(trial) or 0).encode())
        os._exit(0)  # PID 1 leaving kills what is left in the namespace
    os.close(w)
    _pdeathsig()


# -- landlock -------------------------------------------------------------------------

_SYS_CREATE, _SYS_ADD, _SYS_RESTRICT = 444, 445, 446
# write-side rights: write, remove dir/file, make char/dir/reg/sock/fifo/block/sym
_WRITES = 2 | 16 | 32 | 64 | 128 | 256 | 512 | 1024 | 2048 | 4096
_REFER, _TRUNCATE = 8192, 16384
ALWAYS_WRITABLE = ("/dev", "/proc")


def enter_landlock(writable: list) -> None:
    try:  # the kernel's Landlock ABI version (below 1: no Landlock)
        abi = libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except Exception:
        abi = 0
    if abi < 1:
        raise OSError("Landlock is not available")
    handled = _WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr = ctypes.c_uint64(handled)
    fd = _check(
        libc().syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0)), "landlock_create"
    )

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        for path in [*writable, *ALWAYS_WRITABLE]:
            try:
                dfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            rule = PathBeneath(handled, dfd)
            ret = libc().syscall(_SYS_ADD, fd, 1, ctypes.byref(rule), 0)
            os.close(dfd)
            _check(ret, f"landlock_add_rule {path}")
        _check(libc().prctl(38, 1, 0, 0, 0), "no_new_privs")
        _check(libc().syscall(_SYS_RESTRICT, fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)


def sweep_children() -> None:
    """SIGKILL every descendant left (this process is their subreaper)."""
    for _ in range(100):
        kids = []
        for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
            with contextlib.suppress(OSError), open(path) as f:
                kids += [int(x) for x in f.read().split()]
        if not kids:
            return
        for pid in kids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reap the killed until none is left
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def subreaper() -> None:
    libc().prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reaped() -> None:
    """Without a PID namespace (Landlock): fork; the caller goes on in the
    child, the original process is the subreaper of its whole tree, and when
    the trial ends it kills what is left (setsid daemons too) and exits as
    the trial did. The cold launcher does the same around its command."""
    subreaper()
    trial = os.fork()
    if trial == 0:
        _pdeathsig()
        return
    status = _wait(trial)
    if status is None:
        os._exit(1)
    sweep_children()
    exit_as(status)


# -- naming the path a denied write went to (Landlock) ----------------------------------

OUTSIDE = "outside.json"  # in the trial dir: the first write outside it, and where
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DENIED = __import__("re").compile(r"(?:Permission denied|Read-only file system)[^/]*?(/[^\s'\",;]+)")


class Watch:
    """The first write outside the allowed dirs, seen by the audit hook (Python
    opens, removes, renames, mkdir, rmtree) or in an uncaught exception (a
    PermissionError, or TensorFlow's own file system: 'Permission denied:
    /x'), written once to `trial_dir/outside.json` with the script's file:line."""

    def __init__(self, writable: list, root: str, user_where) -> None:
        self.allowed = [os.path.realpath(p) for p in [*writable, *ALWAYS_WRITABLE]]
        self.root = os.path.realpath(root)
        self.user_where = user_where  # harness_data.user_where: the script's file:line
        self.record = os.path.join(writable[0], OUTSIDE)
        self.seen: dict = {}

    def outside(self, path) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return not any(real == a or real.startswith(a.rstrip("/") + "/") for a in self.allowed)

    def note(self, path, frames, kind: str = "audit") -> None:
        """Keep the first write outside the audit hook saw (with a place in the
        project: the first of `frames`, (frame, line) innermost first, in the
        script's code) and the one an uncaught exception names; the parent uses
        them only when the trial crashed (a library that tolerates a failed
        write at import, ~/.keras, is no reason to stop)."""
        where = self.user_where(frames, self.root) or ""
        if kind in self.seen or (kind == "audit" and not where):
            return
        self.seen[kind] = {"path": os.path.abspath(os.fsdecode(path)), "where": where}
        with contextlib.suppress(OSError):
            with open(self.record, "w", encoding="utf-8") as f:
                json.dump(self.seen, f)

    def audit(self, event: str, args: tuple) -> None:
        if "audit" in self.seen:
            return
        path = None
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = args[1] or "", args[2] or 0
            if any(c in str(mode) for c in "wax+") or flags & _WRITE_FLAGS:
                path = args[0]
        elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.rename", "shutil.rmtree", "os.truncate"):
            path = args[0] if args and isinstance(args[0], (str, bytes, os.PathLike)) else None
        if path is not None and self.outside(path):
            import traceback  # here: the cold launcher loads this file too

            self.note(path, traceback.walk_stack(sys._getframe(1)))

    def exception(self, value: BaseException) -> None:
        for exc in (value, value.__cause__, value.__context__):
            if exc is None:
                continue
            path = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
            if path is None:
                found = _DENIED.search(str(exc))
                path = found.group(1) if found else None
            if path is not None and self.outside(path):
                import traceback

                self.note(path, reversed(list(traceback.walk_tb(exc.__traceback__))), "exception")
                return


def watch(spec: dict, root: str, user_where) -> Watch:
    """Install the watch in this (the trial's) process: the audit hook now,
    `Watch.exception` for the harness's excepthook. Landlock only (the
    harness asks for no other): under the overlay a write outside succeeds,
    in the overlay."""
    w = Watch(spec["writable"], root, user_where)
    sys.addaudithook(w.audit)
    return w


def enter(spec: dict | None) -> None:
    """Apply `spec` ({"mode": "overlay" | "landlock" | "none", ...}) to this process."""
    mode = (spec or {}).get("mode", "none")
    if mode == "overlay":
        enter_overlay(spec)
    elif mode == "landlock":
        enter_landlock(spec["writable"])


def enter_or_exit(spec: dict | None) -> None:
    """`enter(spec)`, before the trial's code runs; a failure exits
    CANNOT_CONFINE with the mark on stderr: the parent runs the trial cold."""
    try:
        enter(spec)
    except OSError as e:
        sys.stderr.write(f"{MARK}{e}\n")
        sys.stderr.flush()
        os._exit(CANNOT_CONFINE)


if __name__ == "__main__" and sys.argv[1:2] == ["--probe"]:
    plan = json.loads(sys.argv[2])
    enter(plan)
    if plan.get("mode") == "overlay":  # what the parent checks: a write in the dir bound writable
        with open(os.path.join(plan["writable"][0], "probe"), "w") as f:
            f.write(str(os.getpid()))
    sys.stdout.write("ok\n")
    sys.stdout.flush()
