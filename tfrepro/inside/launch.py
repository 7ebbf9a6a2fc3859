"""The cold-trial launcher: `python -I -S launch.py PARENT_PID CMD...` (stdlib only).

It leads the trial's session (the runner starts it with start_new_session),
runs CMD as its child in the same process group, and exits as CMD did (same
code, or dies of the same signal). Its one job is to kill the whole group
when the tfrepro process PARENT_PID dies, whatever CMD is: a `bash -c`, `uv
run` or other wrapper puts the measured Python below a process that would
otherwise outlive a SIGKILLed tfrepro. Two watches: PR_SET_PDEATHSIG
(SIGTERM, caught) on Linux, and a poll of the parent pid every 0.25 s.

`-I -S`: no site, no sitecustomize, no PYTHON* variables: the harness
activates in CMD's first Python, never here.

Options before CMD: `--confine=JSON` applies `confine.py`'s spec to itself
before starting CMD (Landlock; under bubblewrap the overlay is set up
already) and makes it the subreaper of CMD's tree, whose leftovers it kills
when CMD ends; `--status=PATH` writes CMD's raw wait status there (bubblewrap
turns a signal death into an exit code); PARENT_PID 0: no parent watch (in
bubblewrap's PID namespace, which dies with bubblewrap; a second launcher
outside bubblewrap watches tfrepro, since bubblewrap's --die-with-parent
is set late and misses a parent that died while it started).
"""

import contextlib
import json
import os
import signal
import sys
import threading
import time

CANNOT_START = 127


def _bail(*_args) -> None:
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(137)


def watch_parent(parent: int) -> None:
    """Kill our process group (and leave, 137) once `parent` is no longer our
    parent, polled every 0.25 s: here, and in the trial's Python, which
    leads its own group (harness.py loads this file for it)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.25)
        _bail()

    threading.Thread(target=watch, name="tfrepro-parent-watch", daemon=True).start()


def main(argv: list) -> None:
    parent, cmd = int(argv[0]), argv[1:]
    opts = {}
    while cmd and cmd[0].startswith(("--confine=", "--status=")):
        key, _, value = cmd.pop(0).partition("=")
        opts[key] = value
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confine  # the sibling file: confinement, and how to exit as CMD did

    if "--confine" in opts:
        confine.enter_or_exit(json.loads(opts["--confine"]))
        confine.subreaper()
    signal.signal(signal.SIGTERM, _bail)
    with contextlib.suppress(Exception):
        confine.libc().prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if parent and os.getppid() != parent:
        _bail()
    if parent:
        watch_parent(parent)
    try:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    except OSError as e:
        sys.stderr.write(f"tfrepro: cannot start {cmd[0]!r}: {e.strerror or e}\n")
        sys.stderr.flush()
        os._exit(CANNOT_START)
    _, status = os.waitpid(pid, 0)
    if "--confine" in opts:
        confine.sweep_children()
    if "--status" in opts:
        with open(opts["--status"], "w") as f:
            f.write(str(status))
    if os.WIFSIGNALED(status):
        with contextlib.suppress(ImportError, ValueError, OSError):
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    confine.exit_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
