"""Every command that creates `.tfrepro/` leaves `git status` byte-identical.

A user runs tfrepro inside their git repository; `?? .tfrepro/` in their
`git status` is a leak (3 of 3 new users saw it before the state directory got
one owner). Real git, real subprocesses of the real CLI. The project is plain
Python (a custom loop printing `step=N loss=X`) so the trials cost no
TensorFlow import, except `demo`, which is the bundled TensorFlow example.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo

REPO_ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """\
import math
scale = 1.0
# tfrepro: feature blowup -- the loss goes NaN at step 3
# scale = float("nan")
# tfrepro: end
# tfrepro: feature noop -- does nothing
x = 1
# tfrepro: end
for step in range(1, 9):
    loss = 1.0 / step if step < 3 else scale / step
    print(f"step={step} loss={loss!r}")
"""


def status(repo: GitRepo) -> str:
    return repo.git("status", "--porcelain", "--untracked-files=all", "--ignored=no")


def tfrepro(repo: GitRepo, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**repo.env, "PYTHONPATH": str(REPO_ROOT), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tfrepro", *args],
        cwd=cwd or repo.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def repo(tmp_path) -> GitRepo:
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    repo.commit(
        "a repro",
        {"proj/repro.py": SCRIPT, "proj/tfrepro.toml": "[trial]\nsteps = 8\ntimeout_s = 60\n", "README.md": "mine\n"},
    )
    repo.write("proj/scratch.txt", "an untracked file of mine\n")  # status is not empty to begin with
    return repo


@pytest.mark.e2e
def test_run_bisect_check_report_and_commit_bisect_leave_git_status_unchanged(repo):
    before = status(repo)
    assert "?? proj/scratch.txt" in before

    steps = [
        ("run", ["run", "proj", "--all"]),
        ("bisect", ["bisect", "proj", "--json"]),
        ("check", ["check", "proj"]),
        ("report", ["report", "proj", "--no-localize", "--no-rerun"]),
    ]
    for name, args in steps:
        res = tfrepro(repo, *args)
        assert res.returncode in (0, 1), (name, res.stdout, res.stderr)
        assert status(repo) == before, name
    assert (repo.root / "proj" / ".tfrepro" / ".gitignore").is_file()

    # commit mode: a second commit that turns the NaN on in the file as written
    repo.commit("turn blowup on", {"proj/repro.py": SCRIPT.replace('# scale = float("nan")', 'scale = float("nan")')})
    before = status(repo)
    res = tfrepro(repo, "bisect", "proj", "--good", "HEAD~1", "--bad", "HEAD", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert status(repo) == before


@pytest.mark.e2e
def test_a_state_dir_made_without_its_gitignore_gets_one(repo):
    """The old drift: `.tfrepro/runs/<id>/trials` made with a plain mkdir, so the
    state dir existed and its `.gitignore` was never written."""
    old = repo.root / "proj" / ".tfrepro" / "runs" / "old"
    old.mkdir(parents=True)
    (old / "result.json").write_text("{}")
    assert "?? proj/.tfrepro/" in status(repo)
    res = tfrepro(repo, "run", "proj")
    assert res.returncode in (0, 1), res.stderr
    assert ".tfrepro" not in status(repo)


@pytest.mark.e2e
def test_demo_leaves_the_current_repository_clean(repo):
    before = status(repo)
    res = tfrepro(repo, "demo", "--jobs", "2", cwd=repo.root / "proj")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert status(repo) == before
