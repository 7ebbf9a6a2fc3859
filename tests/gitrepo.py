"""Real git repositories for tests: isolated config, fixed commit dates.

In the manner of copier's tests/helpers.py: every git call gets an
environment with no system or global config and a HOME of its own, and
commits are dated one minute apart from a fixed instant, so shas are
reproducible and nothing depends on the machine's git setup.

Use `isolated_git_env(tmp_path, monkeypatch)` in a test (or fixture) before
the code under test runs git in-process (gitpython), then `GitRepo.init(...)`.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

EPOCH = 1_780_000_000  # a fixed instant (2026-05-28); commit i is EPOCH + 60*i


def git_env(home: Path) -> dict[str, str]:
    """Variables that isolate git from the machine's and the user's config."""
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
        "GIT_AUTHOR_NAME": "Ada Tester",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada Tester",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
        "GIT_TERMINAL_PROMPT": "0",
    }


def isolated_git_env(home: Path, monkeypatch) -> dict[str, str]:
    """Apply `git_env` to this process (monkeypatch undoes it) and return it."""
    home.mkdir(parents=True, exist_ok=True)
    env = git_env(home)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@dataclass
class GitRepo:
    root: Path
    env: dict[str, str]
    commits: list[str] = field(default_factory=list)

    @classmethod
    def init(cls, root: Path, home: Path, branch: str = "main") -> "GitRepo":
        root.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        repo = cls(root, {**os.environ, **git_env(home)})
        repo.git("init", "-q", "-b", branch)
        return repo

    def git(self, *args: str, env: dict[str, str] | None = None) -> str:
        out = subprocess.run(
            ["git", *args],
            cwd=self.root,
            env={**self.env, **(env or {})},
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def write(self, relpath: str, text: str) -> Path:
        p = self.root / relpath
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        """Write `files`, stage them, commit at the next fixed date; the sha."""
        for relpath, text in (files or {}).items():
            self.write(relpath, text)
            self.git("add", "--", relpath)
        date = f"@{EPOCH + 60 * len(self.commits)} +0000"
        self.git(
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
            env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
        )
        sha = self.git("rev-parse", "HEAD").strip()
        self.commits.append(sha)
        return sha

    def snapshot(self, *files: str) -> dict[str, object]:
        """What the user sees: status, stash, branch, HEAD, index, file bytes."""
        return {
            "status": self.git("status"),
            "porcelain": self.git("status", "--porcelain=v1", "--untracked-files=all"),
            "stash": self.git("stash", "list"),
            "branch": self.git("symbolic-ref", "-q", "HEAD"),
            "head": self.git("rev-parse", "HEAD"),
            "index": self.git("ls-files", "--stage"),
            "worktrees": self.git("worktree", "list", "--porcelain"),
            "files": {f: (self.root / f).read_bytes() for f in files if (self.root / f).exists()},
        }
