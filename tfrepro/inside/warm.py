"""The warm trial server: runs INSIDE a trial's interpreter, never imports tfrepro.

Started once per import-time environment by `tfrepro/trials/warm.py` as
`python -c BOOT warm.py SOCKET PRELOAD` (stdlib only, loaded by path). It
imports the PRELOAD modules (NumPy, TensorFlow, Keras), runs no op, touches
no device, then forks one child per trial on request. It is as dumb as
gunicorn's arbiter: import, fork, hand the child its job, reap, report. The
child, not the server, sets up everything per trial.

Protocol (one Unix-socket connection per trial, JSON lines):
    parent → server  {"argv": [script, args...], "cwd", "env", "stdout", "stderr"}
    server → parent  {"pid": N}            the child runs (its own session: pgid == N)
                     {"status": W}         W = the raw wait status, once reaped
                  or {"error": "..."}      nothing was forked: run the trial cold
The server reaps; the parent kills the child's process group (timeout,
Ctrl-C) by pgid. A connection the parent closes before the status kills the
child's group: the connection is the child's lease.

Invariants:
- the server forks only while it has no more threads than right after the
  preload (TensorFlow's import leaves 2 here); otherwise it answers "error";
- the server dies when its stdin (a pipe from the tfrepro process) reaches
  EOF, i.e. when tfrepro exits or is killed, and takes its children with it;
  a child also dies with the server (PR_SET_PDEATHSIG) and the harness
  watches its parent;
- a child does what `python script args` would from here on: own session,
  cwd, argv and sys.orig_argv, sys.path (its [0], and relative PYTHONPATH
  entries made absolute against the trial's cwd, not the server's),
  os.environ replaced, NumPy's global state reseeded from the OS, the harness installed by the same sitecustomize function (its
  TensorFlow/Keras hooks - seeds, determinism - run at the script's first
  import of them, not before the script), stdio on the trial's files, the script as
  `__main__`, CPython's exit-code semantics (SystemExit, uncaught exception
  → traceback + 1, KeyboardInterrupt → killed by SIGINT), non-daemon threads
  joined and atexit handlers run before the exit, no interpreter teardown.
  What it cannot redo: hash randomisation (PYTHONHASHSEED is part of the
  server's key) and anything a module read at import (the server's key).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import glob
import importlib.util
import json
import os
import selectors
import signal
import socket
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ERROR_EXIT = 70  # the child could not be set up (never the script's own code)


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))  # Linux only: the pool sends no trial here elsewhere


# -- the child --------------------------------------------------------------------------


def _redirect(path: str | None, fd: int, flags: int) -> None:
    new = os.open(path or os.devnull, flags, 0o644)
    if new != fd:
        os.dup2(new, fd)
        os.close(new)


def _setup_child(job: dict, server_pid: int, close_fds: list[int]) -> str:
    os.setsid()
    confine = _confine_module()
    with contextlib.suppress(Exception):  # not Linux: the harness's parent watch still runs
        confine._pdeathsig()  # SIGKILL when the server dies
    if os.getppid() != server_pid:
        os._exit(137)
    # The server's fds become /dev/null rather than closed: their Python
    # objects live on in this process, and closing them later must not hit a
    # number the trial reuses.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _redirect(None, 0, os.O_RDONLY)
    spec = job.get("confine")
    _redirect(confine.real_path(spec, job.get("stdout")), 1, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(confine.real_path(spec, job.get("stderr")), 2, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    server_cwd = os.getcwd()  # before the namespace: the server's dir may be hidden in it
    # Confined before the user's code runs, as a cold trial is (overlay: returns in PID 2 of a new
    # namespace; the forked child waits and exits as the trial does). A failure exits CANNOT_CONFINE
    # with the mark on stderr: the parent runs the trial cold.
    confine.enter_or_exit(spec)  # no spec, or mode "none": nothing
    if (spec or {}).get("mode") == "landlock":
        confine.reaped()
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    if "tempfile" in sys.modules:  # the server's TMPDIR, cached by an import (TensorFlow's): read this trial's
        sys.modules["tempfile"].tempdir = None
    sys.argv = list(job["argv"])
    sys.orig_argv = [sys.orig_argv[0], *sys.argv]  # `python script args`, not the server's `-c BOOT`
    script = os.path.abspath(sys.argv[0])
    sys.path[0] = os.path.dirname(script)
    sys.path[1:] = _rebase(sys.path[1:], server_cwd, os.getcwd())
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()  # a cold interpreter seeds NumPy's global state from the OS
    # What sitecustomize does at a cold interpreter's start (the same function: the server's
    # sitecustomize is `_inject/sitecustomize.py`, first on the PYTHONPATH of its trial environment).
    sys.modules["sitecustomize"]._tfrepro_activate()
    return script


# path → code object of the files a trial child loads by path (the harness and
# its siblings), compiled once in the server: a child executes each module
# body afresh, as a cold trial does, but does not compile it again (~30-70 ms a
# trial where no bytecode cache is written: PYTHONDONTWRITEBYTECODE, a
# read-only install). The harness and sitecustomize look here first.
COMPILED: dict = {}
_CHILD_FILES = ("harness*.py", "memory.py", "devices.py", "launch.py")


def _confine_module():
    """`confine.py` next to this file (loaded by path as `_tfrepro_confine`, once, in the server)."""
    module = sys.modules.get("_tfrepro_confine")
    if module is None:
        path = os.path.join(HERE, "confine.py")
        spec = importlib.util.spec_from_file_location("_tfrepro_confine", path)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def _rebase(entries: list, old: str, new: str) -> list:
    """sys.path as a cold interpreter started in `new` would have it: a
    relative PYTHONPATH entry (`.`, `src`) was made absolute against the
    server's cwd `old` (a temp dir of its own, so nothing else lies under it)
    and is made absolute against the trial's instead; then, as `site` does,
    a later duplicate goes."""
    moved = [
        new + p[len(old) :] if isinstance(p, str) and (p == old or p.startswith(old + os.sep)) else p for p in entries
    ]
    if moved == entries:
        return entries
    return list({os.path.normcase(p) if isinstance(p, str) else p: p for p in moved}.values())


def _run_main(script: str) -> tuple[int, int]:
    """The script as `__main__`; returns (the exit code a real interpreter
    would give, the signal it would die of instead, or 0)."""
    import builtins
    import importlib.machinery
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=script,
        __builtins__=builtins,
        __spec__=None,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", script),
    )
    sys.modules["__main__"] = main
    try:
        with open(script, "rb") as f:
            code = compile(f.read(), script, "exec")
        exec(code, main.__dict__)
        return 0, 0
    except SystemExit as e:  # None: 0; an int: itself; anything else: printed, 1
        if e.code is None or isinstance(e.code, int):
            return e.code or 0, 0
        with contextlib.suppress(Exception):
            sys.stderr.write(f"{e.code}\n")
        return 1, 0
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        if tb is not None:
            e.__traceback__ = tb  # the traceback starts at the script, as in a cold run
        sys.excepthook(type(e), e, e.__traceback__)
        return 1, (signal.SIGINT if isinstance(e, KeyboardInterrupt) else 0)


def child_main(job: dict, server_pid: int, close_fds: list[int]) -> None:
    """In the forked child: never returns. The script's end is Py_FinalizeEx's
    order minus the teardown: join threads, atexit, flush, exit."""
    try:
        try:
            script = _setup_child(job, server_pid, close_fds)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(ERROR_EXIT)
        code, sig = _run_main(script)
        import threading

        with contextlib.suppress(BaseException):
            threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        # a wait status: an uncaught KeyboardInterrupt dies of SIGINT
        _confine_module().exit_as(sig or (code & 0xFF) << 8)
    finally:
        os._exit(ERROR_EXIT)


# -- the server --------------------------------------------------------------------------


def _send(conn: socket.socket, msg: dict) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(msg).encode() + b"\n")


def recv_line(conn: socket.socket) -> dict:
    """One JSON line from `conn`, under its timeout (both sides of the
    protocol read with this); ConnectionError when it closes first."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return json.loads(buf)


def killpg(pgid: int) -> None:
    """SIGKILL a process group, gone or not (the parent kills its trials with this too)."""
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


class Server:
    def __init__(self, sock_path: str) -> None:
        self.max_threads = thread_count()  # right after the preload: what it may fork with
        self.pid = os.getpid()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(sock_path)
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *a: None)
        self.children: dict[int, socket.socket] = {}  # pid → its connection
        self.sel = selectors.DefaultSelector()
        self.sel.register(0, selectors.EVENT_READ, "stdin")
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select():
                if key.data == "stdin":
                    if not os.read(0, 4096):
                        self.shutdown()
                elif key.data == "accept":
                    conn, _ = self.listener.accept()
                    self.start(conn)
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 4096):
                            pass
                    self.reap()
                else:  # a child's connection: EOF means its parent let go
                    pid, conn = key.data
                    try:
                        data = conn.recv(4096)
                    except OSError:
                        data = b""
                    if not data:
                        killpg(pid)
                        self.sel.unregister(conn)

    def start(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            job = recv_line(conn)
            conn.setblocking(True)
        except (OSError, ValueError) as e:
            _send(conn, {"error": f"bad job: {e}"})
            conn.close()
            return
        threads = thread_count()
        if threads > self.max_threads:
            _send(conn, {"error": f"{threads} threads in the warm server (at most {self.max_threads} to fork)"})
            conn.close()
            return
        # the server's own descriptors, which no child may keep (Linux only: the selector is epoll's)
        close_fds = [self.listener.fileno(), self.wake_r, self.wake_w, self.sel.fileno(), conn.fileno()]
        close_fds += [c.fileno() for c in self.children.values()]
        pid = os.fork()
        if pid == 0:
            child_main(job, self.pid, close_fds)
        self.children[pid] = conn
        _send(conn, {"pid": pid})
        self.sel.register(conn, selectors.EVENT_READ, (pid, conn))

    def reap(self) -> None:
        with contextlib.suppress(ChildProcessError):  # until no child has ended, or none is left
            while (ended := os.waitpid(-1, os.WNOHANG))[0]:
                pid, status = ended
                conn = self.children.pop(pid, None)
                if conn is not None:
                    with contextlib.suppress(KeyError, ValueError):
                        self.sel.unregister(conn)
                    _send(conn, {"status": status})
                    conn.close()

    def shutdown(self) -> None:
        for pid in list(self.children):
            killpg(pid)
        os._exit(0)


def serve(argv: list[str]) -> None:
    """Entry point: argv = [socket path, comma-separated preload, and, under
    Landlock, the JSON spec the server confines itself with]; it forks with no
    more threads than right after the preload."""
    sock_path, names = argv[0], [n for n in argv[1].split(",") if n]
    try:
        if len(argv) > 2:  # Landlock: the server too writes only in its own dir and the trials dir
            spec = json.loads(argv[2])
            _confine_module().enter_landlock(spec["writable"])
            tmp = os.path.join(spec["writable"][0], "tmp")
            os.makedirs(tmp, exist_ok=True)
            os.environ["TMPDIR"] = tmp  # what an import caches (matplotlib) goes there
        for name in names:  # `mod` imports mod; `mod:attr` also resolves a lazy attribute (tensorflow:keras)
            module_name, _, attr = name.partition(":")
            module = importlib.import_module(module_name)
            if attr:
                getattr(module, attr)
        _confine_module()
        for path in [p for pattern in _CHILD_FILES for p in glob.glob(os.path.join(HERE, pattern))]:
            with contextlib.suppress(OSError, SyntaxError, ValueError), open(path, "rb") as f:
                COMPILED[path] = compile(f.read(), path, "exec", dont_inherit=True)
        gc.collect()
        gc.freeze()  # the children do not copy pages for the collector's sake
        server = Server(sock_path)
        modules = sorted({name.partition(".")[0] for name in sys.modules})
        ready = {"ready": True, "pid": os.getpid(), "threads": server.max_threads, "modules": modules}
    except BaseException as e:
        ready = {"ready": False, "error": f"{type(e).__name__}: {e}"}
        server = None
    sys.stdout.flush()
    os.write(1, json.dumps(ready).encode() + b"\n")
    _redirect(None, 1, os.O_WRONLY)  # nothing else goes to the parent's pipe
    if server is None:
        os._exit(1)
    server.serve()
