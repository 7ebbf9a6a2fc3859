"""The suites' throwaway git repositories (journey_suite.py, wild_suite.py).

A case's `train.py` is committed alone in a fresh temp repository, with an
isolated git config and fixed dates, and tfrepro runs there as a user would;
afterwards `git status` says what the run left in the tree.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "journey",
    "GIT_AUTHOR_EMAIL": "journey@example.invalid",
    "GIT_COMMITTER_NAME": "journey",
    "GIT_COMMITTER_EMAIL": "journey@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}


def child_env() -> dict[str, str]:
    """The environment of a tfrepro child: isolated git, and this interpreter's tfrepro first on the path."""
    env = {**os.environ, **GIT_ENV}
    spec = importlib.util.find_spec("tfrepro")
    if spec is not None and spec.origin:
        root = str(Path(spec.origin).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def git(repo: Path, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@contextmanager
def case_repo(case: Path, *, prefix: str, message: str, env: dict[str, str], keep: bool) -> Iterator[Path]:
    """`case`/train.py committed alone (`message`) in a fresh temp repository
    named after the case; removed afterwards, or kept with its path on stderr."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-{case.name}-"))
    repo = tmp / case.name
    repo.mkdir()
    try:
        shutil.copy2(case / "train.py", repo / "train.py")
        git(repo, "init", "-q", "-b", "main", env=env)
        git(repo, "add", "train.py", env=env)
        git(repo, "commit", "-q", "-m", message, env=env)
        yield repo
    finally:
        if keep:
            print(f"  kept {repo}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def tree_status(repo: Path, env: dict[str, str]) -> tuple[list[str], set[str]]:
    """`git status --porcelain` of the repository (untracked files too), and the paths it names."""
    lines = git(repo, "status", "--porcelain", "--untracked-files=all", env=env).splitlines()
    return lines, {line[3:].strip() for line in lines}
