"""The parent side of warm trials: a pool of warm servers (`inside/warm.py`).

A warm server is an interpreter that has imported NumPy, TensorFlow and Keras
and run nothing; each trial is a child forked from it (DESIGN.md, "Ground
truth": fresh in the sense that matters, and 2–3 s cheaper than a cold
process). CPython's forkserver is the model: started once, asked over a Unix
socket, detected dead by its pipe.

Invariants:
- one server per import-time environment (`server_key`): the interpreter plus
  every variable that TensorFlow, Keras, NumPy, the BLAS/OpenMP runtimes, the
  allocator, the dynamic loader or Python itself may read at start or import.
  `CUDA_VISIBLE_DEVICES` is not in the key: the server never touches a
  device, and each child pins its own before its first op;
- servers start lazily (the first trial waits for the import), are reused by
  every later trial of this process, and die with it: the server watches its
  stdin, a pipe only this process writes, and `close()` ends them;
- whatever goes wrong on the warm side before a child runs (no server, a dead
  one, a server with extra threads) is `WarmUnavailable`: the caller runs the
  trial cold. A server lost while its child ran is marked dead and replaced
  on the next request.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfrepro import inside
from tfrepro.inside.warm import killpg, recv_line
from tfrepro.trials import confine, state

WARM_SERVER = inside.INSIDE_DIR / "warm.py"
BOOT = (
    "import importlib.util as u, sys\n"
    "s = u.spec_from_file_location('_tfrepro_warm', sys.argv[1]); m = u.module_from_spec(s)\n"
    "sys.modules[s.name] = m; s.loader.exec_module(m); m.serve(sys.argv[2:])\n"
)
DEFAULT_PRELOAD = ("numpy", "tensorflow", "tensorflow:keras")
# A warm server is worth it only for a script that imports one of these (itself
# or a module next to it); anything else starts in milliseconds cold.
TF_MODULES = ("tensorflow", "keras", "tf_keras")
_TF_IMPORT = re.compile(r"^\s*(import|from)\s+(" + "|".join(TF_MODULES) + r")\b", re.M)
START_TIMEOUT_S = 180.0
# Servers kept alive at once (each holds an imported TensorFlow, ~0.5 GB).
MAX_SERVERS = 2

# Variables read at interpreter start or at import by Python, NumPy, TensorFlow,
# Keras, BLAS/OpenMP, malloc or the loader: any difference means another server.
KEY_PREFIXES = tuple(
    "TF KERAS XLA_ PYTHON LD_ MALLOC OMP_ KMP_ MKL OPENBLAS GOTO NPY_"
    " NUMPY TCMALLOC JEMALLOC CUDA NVIDIA HIP ROCM LANG LC_ ABSL GRPC".split()
)
PER_TRIAL = frozenset({"TFREPRO_TRIAL_CONFIG", "CUDA_VISIBLE_DEVICES"})
# Writing one of these from the script itself (os.environ[...] = ...) before
# importing TensorFlow changes what the import does: such scripts run cold.
_ENV_WRITE = re.compile(r"environ\s*\[[^\]]*\]\s*=[^=]|environ\.(setdefault|update)\s*\(|putenv\s*\(")
_IMPORT_ENV_NAME = re.compile(r"""["'](TF_(?!CPP_)|KERAS_|XLA_|PYTHON)\w*["']""")


class WarmUnavailable(Exception):
    """No warm child was started: run the trial cold."""


class ServerLost(WarmUnavailable):
    """The server died while its child ran (the child died with it): the
    trial runs again, cold."""


def server_key(executable: str, env: Mapping[str, str], preload: Sequence[str]) -> tuple:
    keyed = sorted((k, v) for k, v in env.items() if k.startswith(KEY_PREFIXES) and k not in PER_TRIAL)
    return (executable, tuple(preload), tuple(keyed))


def session(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """`argv` started leading a session of its own (its process group is what
    `killpg` kills: every trial, probe and warm server), stdin empty unless given."""
    return subprocess.Popen(list(argv), **{"stdin": subprocess.DEVNULL, **popen}, start_new_session=True)


def _text(path: Path, unreadable: str | None = "") -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return unreadable


@dataclass
class WarmChild:
    """One trial forked by a server. `pid` is also its process group."""

    pid: int
    conn: socket.socket
    server: "WarmServer"

    def wait(self, timeout: float | None) -> int:
        """The child's return code as Popen gives it (negative: killed by a
        signal). Raises subprocess.TimeoutExpired, or ServerLost."""
        try:
            self.conn.settimeout(timeout)  # the server writes its one line when the child has ended
            answer = recv_line(self.conn)
        except TimeoutError:
            raise subprocess.TimeoutExpired(["warm", str(self.pid)], timeout or 0) from None
        except OSError:
            self.server.dead = True
            raise ServerLost(f"warm server {self.server.pid} lost while trial {self.pid} ran") from None
        self.close()
        return os.waitstatus_to_exitcode(answer["status"])

    def close(self) -> None:
        if self.conn.fileno() >= 0:
            self.server.running -= 1
        with contextlib.suppress(OSError):
            self.conn.close()


@dataclass
class WarmServer:
    """One running `inside/warm.py`."""

    executable: str
    env: dict[str, str]
    preload: tuple[str, ...]
    proc: subprocess.Popen | None = None
    tmp: str | None = None
    host: str | None = None  # where the real file system is, in a confined server's view
    root: Path | None = None  # Landlock: the trials dir its children write under (the server may too)
    pid: int | None = None
    dead: bool = False
    info: dict = field(default_factory=dict)
    running: int = 0  # children forked and not yet closed (never evict a busy server)
    last_used: float = 0.0
    # `tmp` while it is ours (`state.owned`): `close` removes it and lets its lock go
    owned: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False, compare=False)

    @property
    def sock_path(self) -> str:
        return os.path.join(self.tmp or "", "s")

    def start(self) -> None:
        self.tmp = self.owned.enter_context(state.owned("tfrepro-warm-"))  # swept by the next run if we are killed
        cmd = [self.executable, "-c", BOOT, str(WARM_SERVER), self.sock_path, ",".join(self.preload)]
        # Under the overlay the server itself writes only into one of its own
        # (an import that creates ~/.keras); its children see the real files.
        argv, self.host = confine.server_argv(cmd, Path(self.tmp), self.root)
        with open(os.path.join(self.tmp, "server.log"), "wb") as log:
            try:
                self.proc = session(
                    argv, cwd=self.tmp, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
                )
            except OSError as e:
                self.dead = True
                raise WarmUnavailable(f"cannot start a warm server: {e}") from None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else b""
        self.proc.stdout.close()
        try:
            self.info = json.loads(line) if line else {"ready": False, "error": "no answer"}
        except ValueError:
            self.info = {"ready": False, "error": f"bad answer {line[:200]!r}"}
        if not self.info.get("ready"):
            self.close()  # marks it dead
            raise WarmUnavailable(f"warm server did not start: {self.info.get('error')}")
        self.pid = self.info["pid"]

    def shadowed_by(self, script_dir: Path) -> str | None:
        """A module of the script's dir that a cold run would import instead of
        the one this server imported already (a local `utils.py`, `six.py`, ...)."""
        loaded = set(self.info.get("modules", ()))
        with contextlib.suppress(OSError):  # an unreadable dir: nothing to shadow
            for entry in script_dir.iterdir():
                name = entry.stem if entry.suffix == ".py" else entry.name if entry.is_dir() else None
                if name in loaded:
                    return name
        return None

    def alive(self) -> bool:
        return not self.dead and self.proc is not None and self.proc.poll() is None

    def submit(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        confine: Mapping | None = None,
    ) -> WarmChild:
        """Fork one trial, confined by the child itself after the fork as
        `confine` says (`trials/confine.spec_for`); raises WarmUnavailable
        when nothing was started."""
        if not self.alive():
            self.dead = True
            raise WarmUnavailable("warm server is not running")
        job = {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "stdout": str(stdout), "stderr": str(stderr)}
        if confine:
            job["confine"] = {**confine, "host": self.host} if confine.get("mode") == "overlay" else dict(confine)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(30)
            conn.connect(self.sock_path)
            conn.sendall(json.dumps(job).encode() + b"\n")
            answer = recv_line(conn)
            conn.settimeout(None)
        except (OSError, ValueError) as e:
            conn.close()
            self.dead = not self.alive() or isinstance(e, OSError)
            raise WarmUnavailable(f"warm server did not take the job: {e}") from None
        if "pid" not in answer:
            conn.close()
            raise WarmUnavailable(f"warm server refused the job: {answer.get('error')}")
        self.running += 1
        self.last_used = time.monotonic()
        return WarmChild(int(answer["pid"]), conn, self)

    def close(self) -> None:
        """End the server (its children die with it) and remove its socket dir."""
        self.dead = True
        if self.proc is not None:
            try:
                self.proc.stdin.close()  # EOF: the server kills its children and exits (a pipe: `start`)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                killpg(self.proc.pid)
                self.proc.wait()
        self.owned.close()


class WarmPool:
    """Warm servers by `server_key`, started on first use, shared by threads.

    `preload` is what each server imports; `only_tf_scripts` (the default)
    keeps scripts that import no TensorFlow/Keras cold, where a warm server
    saves nothing."""

    def __init__(
        self,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        *,
        only_tf_scripts: bool = True,
        max_servers: int = MAX_SERVERS,
    ) -> None:
        self.preload = tuple(preload)
        self.max_servers = max_servers
        self.only_tf_scripts = only_tf_scripts
        self._servers: dict[tuple, WarmServer] = {}
        self._broken: dict[tuple, str] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self.closed = False

    def wants(self, script: Path) -> str | None:
        """Why `script` should run cold, or None when it can run warm."""
        if not hasattr(os, "fork") or not Path("/proc/self").exists():
            return "no fork/Linux"
        if not script.is_file():
            return "entry is not a file"
        # the script, or a .py file next to it, imports TensorFlow or Keras
        if self.only_tf_scripts and not any(_TF_IMPORT.search(_text(p)) for p in [script, *script.parent.glob("*.py")]):
            return "imports no TensorFlow/Keras"
        text = _text(script, None)  # a script that cannot be read runs cold too
        if text is not None and not (_ENV_WRITE.search(text) and _IMPORT_ENV_NAME.search(text)):
            return None
        return "sets an import-time variable itself"  # writes to os.environ, names a variable read at import

    def server(self, executable: str, env: Mapping[str, str], root: Path | None = None) -> WarmServer:
        """The live server for this environment, started if need be."""
        if self.closed:
            raise WarmUnavailable("warm pool closed")
        key = server_key(executable, env, self.preload)
        with self._lock:
            if key in self._broken:
                raise WarmUnavailable(self._broken[key])
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            server = self._servers.get(key)
            if server is not None and server.alive():
                return server
            if server is not None:
                server.close()
            server = WarmServer(
                executable, {k: v for k, v in env.items() if k not in PER_TRIAL}, self.preload, root=root
            )
            # Room for one more server: end the least recently used idle ones (a version
            # bisect meets one interpreter after another; each idle server holds its TensorFlow).
            with self._lock:
                live = [(k, s) for k, s in self._servers.items() if s.alive()]
                idle = sorted((s.last_used, k) for k, s in live if s.running == 0)
                gone = [self._servers.pop(k) for _, k in idle[: max(0, len(live) - self.max_servers + 1)]]
            for old in gone:
                old.close()
            try:
                server.start()
            except WarmUnavailable as e:
                with self._lock:
                    self._broken[key] = str(e)  # an import that fails once fails again
                raise
            self._servers[key] = server
            return server

    def close(self) -> None:
        self.closed = True
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.close()


# `--cold` (the CLI's switch): every trial this process runs, or sends to a Ray
# worker, runs in a cold process (`TrialOptions.cold` does the same for one
# trial); `runner.run_variant` and the Ray tasks this process sends read it.
COLD = False
_DEFAULT: WarmPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> WarmPool:
    """The process's pool, closed at exit (and, whatever the exit, its
    servers die when this process does)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT.closed:
            _DEFAULT = WarmPool()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def close_default_pool() -> None:
    """End the process's warm servers (the next trial starts new ones)."""
    pool = _DEFAULT  # one read: `default_pool` may replace it meanwhile
    if pool is not None:
        pool.close()
