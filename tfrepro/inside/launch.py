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
"""

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


def _watch(parent: int) -> None:
    while True:
        time.sleep(0.25)
        if os.getppid() != parent:
            _bail()


def main(argv: list) -> None:
    parent, cmd = int(argv[0]), argv[1:]
    signal.signal(signal.SIGTERM, _bail)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != parent:
        _bail()
    threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    try:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    except OSError as e:
        sys.stderr.write(f"tfrepro: cannot start {cmd[0]!r}: {e.strerror or e}\n")
        sys.stderr.flush()
        os._exit(CANNOT_START)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, ValueError, OSError):
            pass
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught, nor reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1:])
