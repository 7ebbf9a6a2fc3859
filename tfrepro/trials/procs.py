"""How a trial's process runs: forked from a warm server, or cold behind a launcher.

`spawn` is the one way in (`runner.run_variant` prepares the trial dir and
the environment, calls it and reads the result): the trial runs warm
(`run_warm`) unless that raises `warm.WarmUnavailable`, then cold
(`run_cold`). Either gives how the process ended (`Exit`), a cold process
that could not start included (`Exit.error`).

Invariants:
- every trial leads its own process group (the launcher, or the warm child
  after setsid) and is killed as a group: at its timeout, after it ends
  (grandchildren), on Ctrl-C, by `stop_trials`;
- no trial outlives this process: the cold launcher kills its group when we
  die (`inside/launch.py`), the warm server its children (`inside/warm.py`);
- a trial killed by `stop_trials` raises `TrialStopped` in the thread that
  ran it, so it is never cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfrepro import inside
from tfrepro.inside import confine as confine_inside
from tfrepro.inside import harness
from tfrepro.inside.warm import killpg
from tfrepro.trials import confine, warm
from tfrepro.trials.state import LOGS


@dataclass(frozen=True)
class Exit:
    """How a trial's process ended: its return code (as Popen gives it; None
    when it could not be read after a kill), whether it timed out, its wall
    seconds, how it ran ("warm" | "cold"), and, when it could not start at
    all, why (`error`)."""

    rc: int | None
    timed_out: bool
    wall_s: float
    process: str
    error: str | None = None


def warm_argv(cmd: Sequence[str], python: str | None = None) -> list[str] | None:
    """`[python, script.py, args...]` → `[script.py, args...]`; None for
    anything else (`-m`, interpreter options, a wrapper, another program):
    those run cold. `python`: the trial's interpreter (default: this one)."""
    if len(cmd) < 2 or cmd[0] != (python or sys.executable) or cmd[1].startswith("-") or not cmd[1].endswith(".py"):
        return None
    return list(cmd[1:])


def spawn(
    cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: float, trial_dir: Path, pool: "warm.WarmPool | None"
) -> Exit:
    """The trial forked from `pool`'s warm server, or, without a pool or
    when the warm side cannot serve it, behind the cold launcher; its logs
    are `state.LOGS` in `trial_dir`."""
    if pool is not None:
        try:
            return run_warm(cmd, cwd, env, timeout, trial_dir, pool)
        except warm.WarmUnavailable:
            result_path = str(trial_dir / "result.json")
            for stale in (result_path, harness.progress_path(result_path)):
                Path(stale).unlink(missing_ok=True)  # left by a warm child whose server died
    return run_cold(cmd, cwd, env, timeout, trial_dir)


def run_warm(
    cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: float, trial_dir: Path, pool: "warm.WarmPool"
) -> Exit:
    """The trial (a plain `python script.py`: `warm_argv`) forked from a warm
    server; raises `warm.WarmUnavailable` (`ServerLost` too) when it must run cold."""
    argv = list(cmd[1:])
    reason = pool.wants(cwd / argv[0])
    if reason is not None:
        raise warm.WarmUnavailable(reason)
    start = time.perf_counter()
    conf = confine.require()
    server = pool.server(cmd[0], env, root=trial_dir.parent)
    shadow = server.shadowed_by((cwd / argv[0]).parent)
    if shadow is not None:
        raise warm.WarmUnavailable(f"the script's dir has its own {shadow!r}, loaded already by the server")
    spec = confine.spec_for(conf, trial_dir, also=[cwd])
    if not confine.server_allows(conf, server.root, spec):  # a Landlocked server confines its children to its dirs
        raise warm.WarmUnavailable("the warm server's confinement does not allow this trial's dirs")
    stdout, stderr = (trial_dir / name for name in LOGS)
    child = server.submit(argv, cwd, confine.trial_env(env, trial_dir, cwd), stdout, stderr, confine=spec)
    rc, timed_out = _watch(child, timeout, trial_dir)  # ServerLost: it runs again, cold
    if rc == confine_inside.CANNOT_CONFINE:  # and its stderr says so
        with contextlib.suppress(OSError), open(stderr, "rb") as f:
            if confine_inside.MARK.encode() in f.read(4096):
                raise warm.WarmUnavailable("the warm child could not confine itself")
    return Exit(rc, timed_out, time.perf_counter() - start, "warm")


def run_cold(cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: float, trial_dir: Path) -> Exit:
    """The trial behind the launcher, confined (`trials/confine.py`) to `trial_dir`."""
    status_path = trial_dir / "exit.status"
    status_path.unlink(missing_ok=True)
    argv = confined(cmd, trial_dir, status=status_path, also=[cwd])
    env = confine.trial_env(env, trial_dir, cwd)
    start = time.perf_counter()
    with open(trial_dir / LOGS[0], "wb") as out, open(trial_dir / LOGS[1], "wb") as err:
        try:
            proc = warm.session(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        except OSError as e:
            return Exit(None, False, 0.0, "cold", error=f"cannot start {cmd[0]!r}: {e.strerror or e}")
        rc, timed_out = _watch(proc, timeout, trial_dir)
    with contextlib.suppress(OSError, ValueError):  # the command's own return code (bubblewrap's is 128+N for a signal)
        rc = os.waitstatus_to_exitcode(int(status_path.read_text()))
    return Exit(rc, timed_out, time.perf_counter() - start, "cold")


def _watch(child: "subprocess.Popen | warm.WarmChild", timeout: float, trial_dir: Path) -> tuple[int | None, bool]:
    """Wait up to `timeout` for a cold or warm trial (`child.pid` leads its group), then kill the
    group and, outside the overlay, its strays, however it ended (an interruption is raised after)
    -> (its return code, None when unread after a kill; whether it timed out)."""
    rc, timed_out = None, False
    with running(child.pid):
        try:
            rc = child.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            killpg(child.pid)
            if rc is None:  # killed: read its status (a timeout is the result either way)
                with contextlib.suppress(subprocess.TimeoutExpired, warm.ServerLost):
                    rc = child.wait(10)
            if isinstance(child, warm.WarmChild):
                child.close()
            for pid in strays(trial_dir) if confine.require().mode != "overlay" else ():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    return rc, timed_out


def launcher(cmd: Sequence[str], options: Sequence[str] = (), parent: int | None = None) -> list[str]:
    """`cmd` behind inside/launch.py, which kills the trial's group when we die."""
    pid = os.getpid() if parent is None else parent
    return [sys.executable, "-I", "-S", str(inside.LAUNCH), str(pid), *options, *cmd]


def confined(cmd: Sequence[str], trial_dir: Path, status: Path | None = None, also: Sequence[Path] = ()) -> list[str]:
    """`cmd` behind the launcher, confined to `trial_dir` (and `also`) by the
    active mechanism (refused without one unless --unconfined,
    `confine.require`): every process tfrepro starts for a user's code is
    started with this."""
    conf = confine.require()
    options = [f"--status={status}"] if status is not None else []
    if conf.mode == "overlay":
        # The inner launcher leads nothing (bubblewrap's PID namespace dies
        # with bubblewrap); the outer one watches us. bubblewrap's own
        # --die-with-parent is set only once its namespaces are built, and
        # a tfrepro killed before that would leave it orphaned for good.
        bwrap = confine.bwrap_argv(conf.bwrap, conf.overlay, confine.writable_dirs(trial_dir, also))
        return launcher([*bwrap, "--", *launcher(cmd, options, parent=0)])
    if conf.mode == "landlock":
        options.append("--confine=" + json.dumps(confine.spec_for(conf, trial_dir, also)))
    return launcher(cmd, options)


# -- stopping the running trials (Ctrl-C with --jobs > 1) -------------------------------


class TrialStopped(KeyboardInterrupt):
    """The trial was killed by `stop_trials`: no result, nothing cached."""


# The trials running in this process: the process group each thread waits on
# (one at a time), and the threads whose trial `stop_trials` killed.
_LOCK = threading.Lock()
_RUNNING: dict[int, int] = {}  # thread ident → pgid
_STOPPED: set[int] = set()


@contextlib.contextmanager
def running(pgid: int) -> Iterator[None]:
    """While this thread waits on the trial of process group `pgid`;
    raises TrialStopped at its end when `stop_trials` killed it."""
    me = threading.get_ident()
    with _LOCK:
        _RUNNING[me] = pgid
    try:
        yield
    finally:
        with _LOCK:
            _RUNNING.pop(me, None)
            stopped = me in _STOPPED
            _STOPPED.discard(me)
        if stopped:
            raise TrialStopped()


def stop_trials(threads: Iterable[int] | None = None) -> int:
    """SIGKILL the process group of every running trial (of `threads` only,
    when given) now; their `run_variant` raises TrialStopped. Returns how many."""
    wanted = None if threads is None else set(threads)
    with _LOCK:
        hit = [(t, pg) for t, pg in _RUNNING.items() if (wanted is None or t in wanted) and t not in _STOPPED]
        _STOPPED.update(t for t, _ in hit)
    for _, pgid in hit:
        killpg(pgid)
    return len(hit)


def strays(trial_dir: Path, proc: Path = Path("/proc")) -> list[int]:
    """The processes still running with this trial's TMPDIR (`confine.trial_env`)
    in their environment: what left the trial's process group (a setsid
    daemon) and, without a PID namespace, outlived its trial, also when the
    trial was killed at its timeout (its launcher or reaper with it). A
    process that rewrote its environment is not seen."""
    mark = b"TMPDIR=" + os.fsencode(Path(trial_dir) / "tmp")
    me, out = os.getpid(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours
        if mark in environ.split(b"\0"):
            out.append(int(entry.name))
    return out


def run_probe(argv: Sequence[str], cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str] | None:
    """A probe child (`tfrepro env`'s environment probe, which must run where
    no trial can; `argv` confined by the caller where it can be) -> (exit
    code, stderr), or None when it timed out. Its whole process group is
    killed on the way out, finished or not."""
    proc = warm.session(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, err or ""
    except subprocess.TimeoutExpired:
        return None
    finally:
        killpg(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):  # pragma: no cover - SIGKILL not honoured
            proc.wait(timeout=10)
