"""One Python environment per TensorFlow version, built once, cached, reused (nox's model).

An `EnvSpec` says what an environment holds: the TensorFlow distribution the
user has (`tensorflow` or `tensorflow-cpu`) pinned to one version, the
project's own requirements (TensorFlow's stack and tfrepro left out: the
version tried decides TensorFlow and Keras, and a trial never imports
tfrepro), `tf_keras` when trials run with legacy Keras, and the interpreter.
`EnvStore` keeps them under the user cache (`$XDG_CACHE_HOME/tfrepro/envs`,
shared across projects), one directory per spec named so a user can tell
them apart: `tf-2.15.1-cpu-py3.11-<spec hash>`.

Invariants:
- an environment is reused only when its spec file holds the same spec; the
  spec file is written last, atomically, so a half-built environment (an
  interrupted or failed install) is never reused: it is rebuilt, or pruned;
- one builder per environment at a time (a lock file beside it); readers
  never see a directory without its spec file as ready;
- a failed build raises `EnvError` with the installer's last lines and leaves
  nothing behind; the caller makes that version untestable (a skip);
- the versions a trial runs with (TensorFlow, Keras, tf_keras, Python) are
  read once from the environment's own interpreter and kept in the spec file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from tfrepro.dists import TF_DISTS, VERSIONS_SCRIPT, dist_version
from tfrepro.errors import TfreproError
from tfrepro.projectfiles import atomic_write
from tfrepro.trials.releases import hide_userinfo
from tfrepro.trials.state import tree_size
from tfrepro.trials.values import read_json

SPEC_FILE = "tfrepro-env.json"
# Decided by the version tried, never by the project's requirements.
TF_STACK = frozenset(TF_DISTS) | {"keras", "tf-keras", "keras-nightly", "tfrepro"}
# The first TensorFlow whose tf.keras is Keras 3 (tf_keras is Keras 2 from there on).
KERAS3_FROM = (2, 16)

OnLine = Callable[[str], None]
# run(argv, on_line) -> (exit code, last lines of output)
RunCmd = Callable[[Sequence[str], OnLine], tuple[int, list[str]]]


class EnvError(TfreproError):
    """An environment could not be built (the version cannot be tried)."""


# -- what an environment holds ---------------------------------------------------------


def detect_tf_dist() -> str:
    """`tensorflow-cpu` if that is what this environment has, else `tensorflow`."""
    return "tensorflow-cpu" if dist_version("tensorflow-cpu") else "tensorflow"


def project_requirements(root: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(kept, left out): `requirements.txt` lines and `[project].dependencies`
    of `root`, without TensorFlow's stack, tfrepro, options (`-r`, `-e`, `--...`)
    and local paths."""
    req = Path(root) / "requirements.txt"
    raw = req.read_text(encoding="utf-8").splitlines() if req.is_file() else []
    lines = [x for x in (line.split(" #", 1)[0].strip() for line in raw) if x and not x.startswith("#")]
    pyproject = Path(root) / "pyproject.toml"
    if pyproject.is_file():
        try:
            deps = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("dependencies", [])
        except tomllib.TOMLDecodeError:
            deps = []
        lines.extend(str(d).strip() for d in deps if str(d).strip())
    kept, dropped = [], []
    for line in dict.fromkeys(lines):
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""  # normalized (PEP 503)
        (dropped if line.startswith(("-", ".", "/")) or not name or name in TF_STACK else kept).append(line)
    return tuple(sorted(kept)), tuple(dropped)


def tf_keras_pin(tf_version: str) -> str | None:
    """The tf_keras matching a TensorFlow release (None before Keras 3: there
    tf.keras is Keras 2 already)."""
    m = re.match(r"(\d+)\.(\d+)", tf_version)
    major, minor = (int(m[1]), int(m[2])) if m else (0, 0)
    return f"tf_keras>={major}.{minor},<{major}.{minor + 1}" if (major, minor) >= KERAS3_FROM else None


@dataclass(frozen=True)
class EnvSpec:
    """Everything that decides what an environment holds (its name's hash)."""

    tf_dist: str
    tf_version: str
    python: str  # the base interpreter's real path
    python_version: str  # "3.11"
    requirements: tuple[str, ...] = ()
    legacy_keras: bool = False

    def packages(self) -> list[str]:
        out = [f"{self.tf_dist}=={self.tf_version}", *self.requirements]
        pin = tf_keras_pin(self.tf_version) if self.legacy_keras else None
        return out + [pin] if pin else out

    def to_dict(self) -> dict:
        return {**asdict(self), "requirements": list(self.requirements)}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    @property
    def name(self) -> str:
        dist = "-cpu" if self.tf_dist == "tensorflow-cpu" else ""
        keras = "-tfkeras" if self.legacy_keras and tf_keras_pin(self.tf_version) else ""
        return f"tf-{self.tf_version}{dist}{keras}-py{self.python_version}-{self.digest()[:8]}"


def spec_for(
    version: str, root: Path | None = None, *, tf_dist: str | None = None, legacy_keras: bool = False
) -> EnvSpec:
    """The spec of `version` for the project at `root`, on this interpreter."""
    reqs = project_requirements(root)[0] if root is not None else ()
    # the interpreter behind this one (a venv's python is a link to it)
    py = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return EnvSpec(
        tf_dist or detect_tf_dist(), version, py, f"{sys.version_info[0]}.{sys.version_info[1]}", reqs, legacy_keras
    )


@dataclass(frozen=True)
class Env:
    """A ready environment: its interpreter and the versions inside it."""

    path: Path
    spec: EnvSpec
    versions: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def name(self) -> str:
        return self.path.name


# -- reading the versions inside an environment ------------------------------------------


def read_versions(python: Path | str) -> dict:
    """`dists.versions()` of another interpreter: its TensorFlow, Keras,
    tf_keras and Python versions, from package metadata (nothing is imported: ~50 ms)."""
    try:
        out = subprocess.run(
            [str(python), "-I", "-c", VERSIONS_SCRIPT], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        return json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        raise EnvError(f"cannot read the versions of {python}: {e}") from None


# -- installers: `uv` when there is one, else venv + pip; each command's output
# streamed line by line (progress) and its tail kept (the reason an install failed).

_LOG_TAIL = 12


def run_streaming(argv: Sequence[str], on_line: OnLine) -> tuple[int, list[str]]:
    """Run `argv`, each output line to `on_line`; (exit code, last lines)."""
    tail: deque[str] = deque(maxlen=_LOG_TAIL)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
            errors="replace",
        )
    except OSError as e:
        return 127, [f"cannot start {argv[0]}: {e.strerror or e}"]
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            line = hide_userinfo(line.rstrip())  # a credentialed index URL is never echoed
            if line:
                tail.append(line)
                on_line(line)
        return proc.wait(), list(tail)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


class Installer(Protocol):
    name: str

    def commands(self, path: Path, spec: EnvSpec) -> list[list[str]]: ...


@dataclass(frozen=True)
class VenvInstaller:
    """With `uv`: `uv venv --python <interpreter>` + `uv pip install --python
    <env python>`; without: `python -m venv` + pip."""

    uv: str | None = None

    @property
    def name(self) -> str:
        return "uv" if self.uv else "pip"

    def commands(self, path: Path, spec: EnvSpec) -> list[list[str]]:
        py = str(path / "bin" / "python")
        if self.uv:
            return [
                [self.uv, "venv", "--quiet", "--python", spec.python, str(path)],
                [self.uv, "pip", "install", "--python", py, *spec.packages()],
            ]
        return [
            [spec.python, "-m", "venv", str(path)],
            [py, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *spec.packages()],
        ]


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/tfrepro`, else `~/.cache/tfrepro`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tfrepro"


# -- the store -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvInfo:
    """One directory of the store, as `tfrepro envs` lists it."""

    name: str
    path: Path
    ready: bool
    spec: dict | None
    versions: dict | None
    last_used: float
    size: int | None = None


class EnvStore:
    """The environments under `root` (default: the user cache, shared)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        installer: Installer | None = None,
        run: RunCmd | None = None,
        probe: Callable[[Path], dict] = read_versions,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root) if root is not None else cache_root() / "envs"
        if installer is None:  # uv beside this interpreter (installed in the venv), else on PATH, else pip
            uv = Path(sys.executable).parent / "uv"
            installer = VenvInstaller(str(uv) if uv.is_file() and os.access(uv, os.X_OK) else shutil.which("uv"))
        self.installer = installer
        self.run = run or run_streaming
        self.probe = probe
        self.clock = clock

    def path(self, spec: EnvSpec) -> Path:
        return self.root / spec.name

    def ready(self, spec: EnvSpec) -> Env | None:
        """The environment of `spec` if it is fully built with this very spec."""
        path = self.path(spec)
        data = read_json(path / SPEC_FILE)
        if not data or data.get("spec") != spec.to_dict() or not (path / "bin" / "python").exists():
            return None
        return Env(path, spec, dict(data.get("versions") or {}))

    @contextmanager
    def _lock(self, name: str, *, wait: bool = True) -> Iterator[bool]:
        """The mutex of environment `name` between its builders and `prune`: a
        lock file beside its dir (a build removes and remakes the dir), never
        removed (a process waiting on it would hold a lock nobody else sees).
        Yields whether it is held: without `wait`, False when another holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{name}.lock", "w") as f:  # closing it releases the lock
            try:
                fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except OSError:
                if wait:
                    raise
                held = False  # held by another process (or cannot tell: left alone)
            yield held

    def ensure(self, spec: EnvSpec, on_line: OnLine | None = None) -> Env:
        """The ready environment of `spec`, built first when missing or stale.
        Raises EnvError (nothing left behind) when the build fails."""
        say = on_line or (lambda line: None)
        with self._lock(spec.name):
            env = self.ready(spec)
            if env is not None:
                os.utime(env.path / SPEC_FILE)  # last used
                say(f"environment {spec.name}: reused")
                return env
            path = self.path(spec)
            if path.exists():  # half-built, or built from another spec: never reused
                say(f"environment {spec.name}: removing an incomplete or outdated build")
                shutil.rmtree(path, ignore_errors=True)
            say(f"environment {spec.name}: creating with {self.installer.name} ({', '.join(spec.packages())})")
            started = self.clock()
            try:
                for argv in self.installer.commands(path, spec):
                    rc, tail = self.run(argv, lambda line: say(f"  {line}"))
                    if rc != 0:
                        raise EnvError(
                            f"installing {' '.join(spec.packages())} failed (exit {rc}): "
                            + (tail[-1] if tail else "no output")
                        )
                versions = self.probe(path / "bin" / "python")
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
            record = {"spec": spec.to_dict(), "versions": versions}
            atomic_write(path / SPEC_FILE, json.dumps(record, indent=1, sort_keys=True).encode())
            say(f"environment {spec.name}: ready in {self.clock() - started:.1f} s")
            return Env(path, spec, versions)

    # -- tfrepro envs ----------------------------------------------------------
    def entries(self, *, sizes: bool = False) -> list[EnvInfo]:
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            data = read_json(path / SPEC_FILE)
            try:
                used = (path / SPEC_FILE).stat().st_mtime if data else path.stat().st_mtime
            except OSError:
                used = 0.0
            got, size = data or {}, tree_size(path) if sizes else None
            out.append(EnvInfo(path.name, path, data is not None, got.get("spec"), got.get("versions"), used, size))
        return out

    def prune(self, *, max_age_days: float = 30.0, everything: bool = False) -> list[tuple[EnvInfo, str]]:
        """Remove half-built environments, those whose interpreter is gone, and
        those unused for `max_age_days` (all with `everything`). One being built
        right now (its lock is held) is left alone. Returns (env, why) removed."""
        removed = []
        now = self.clock()
        for info in self.entries():
            if everything:
                why = "asked for"
            elif not info.ready:
                why = "incomplete build"
            elif info.spec and not Path(info.spec.get("python", "")).exists():
                why = f"its interpreter {info.spec.get('python')} is gone"
            elif now - info.last_used > max_age_days * 86400:
                why = f"unused for {(now - info.last_used) / 86400:.0f} days"
            else:
                continue
            with self._lock(info.name, wait=False) as held:
                if not held:
                    continue  # being built or used right now
                shutil.rmtree(info.path, ignore_errors=True)
            removed.append((info, why))
        return removed


# -- the command bodies of `tfrepro envs [--prune]` (the CLI prints these lines) ---------------


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} GB"


def envs_report(
    store: EnvStore, *, prune: bool = False, max_age_days: float = 30.0, everything: bool = False
) -> tuple[dict[str, object], list[str]]:
    """`tfrepro envs [--prune]` -> (its --json document, the lines it prints
    otherwise): one line per environment (name, state, versions, size, last
    use), or with `prune` what was removed and why."""
    if prune:
        removed = store.prune(max_age_days=max_age_days, everything=everything)
        lines = [f"removed {info.name} ({why})" for info, why in removed] or [f"nothing to prune in {store.root}"]
        return {"root": str(store.root), "removed": [{"name": i.name, "reason": why} for i, why in removed]}, lines
    infos = store.entries(sizes=True)
    lines = [f"environments in {store.root}:" if infos else f"no environments in {store.root}"]
    for i in infos:
        v = i.versions or {}
        what = (
            f"tensorflow {v.get('tensorflow')}, keras {v.get('keras')}"
            + (f", tf_keras {v['tf_keras']}" if v.get("tf_keras") else "")
            + f", python {v.get('python')}"
            if i.ready
            else "INCOMPLETE (removed by --prune)"
        )
        lines.append(f"  {i.name}  {what}  {_size(i.size)}  used {(time.time() - i.last_used) / 86400:.0f} days ago")
    envs = [{k: getattr(i, k) for k in ("name", "ready", "versions", "size", "last_used")} for i in infos]
    return {"root": str(store.root), "environments": envs}, lines
