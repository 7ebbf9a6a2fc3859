"""How an environment is built: `uv` when there is one, else venv + pip;
each command's output streamed line by line (progress) and its tail kept
(the reason an install failed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tfrepro.urls import hide_userinfo

if TYPE_CHECKING:
    from tfrepro.trials.envs import EnvSpec

OnLine = Callable[[str], None]
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
class UvInstaller:
    """`uv venv --python <interpreter>` + `uv pip install --python <env python>`."""

    uv: str
    name: str = "uv"

    def commands(self, path: Path, spec: EnvSpec) -> list[list[str]]:
        return [
            [self.uv, "venv", "--quiet", "--python", spec.python, str(path)],
            [self.uv, "pip", "install", "--python", str(path / "bin" / "python"), *spec.packages()],
        ]


@dataclass(frozen=True)
class PipInstaller:
    """`python -m venv` + pip, when uv is not there."""

    name: str = "pip"

    def commands(self, path: Path, spec: EnvSpec) -> list[list[str]]:
        py = str(path / "bin" / "python")
        return [
            [spec.python, "-m", "venv", str(path)],
            [py, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *spec.packages()],
        ]


def default_installer() -> Installer:
    """uv beside this interpreter (installed in the venv), else on PATH, else pip."""
    beside = Path(sys.executable).parent / "uv"
    uv = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("uv")
    return UvInstaller(uv) if uv else PipInstaller()
