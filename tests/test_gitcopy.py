"""The git edge of commit mode against real repositories (isolated config, fixed dates)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gitrepo import GitRepo, isolated_git_env

from tfrepro.bisect import gitcopy as cm
from tfrepro.errors import TfreproError, UserError
from tfrepro.trials.state import MARK, StateDir, hold


@pytest.fixture
def repo(tmp_path, monkeypatch) -> GitRepo:
    isolated_git_env(tmp_path / "home", monkeypatch)
    r = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    r.commit("add the project", {"proj/repro.py": "print('v0')\n", "README": "hi\n"})
    for i in range(1, 6):
        r.commit(f"change {i}", {"proj/repro.py": f"print('v{i}')\n"})
    return r


# -- open_range: the bad inputs (exit 2) -------------------------------------


def test_range_lists_good_to_bad_oldest_first_with_commit_details(repo):
    rng = cm.open_range(repo.root / "proj", repo.commits[1], repo.commits[4])
    assert [c.sha for c in rng.commits] == repo.commits[1:5]
    assert rng.relpath == "proj"
    assert rng.good.subject == "change 1"
    assert rng.bad.author == "Ada Tester <ada@example.com>"
    assert rng.bad.date == "2026-05-28T20:30:40+00:00"


def test_not_a_git_repository(tmp_path, monkeypatch):
    isolated_git_env(tmp_path / "home", monkeypatch)
    (tmp_path / "plain").mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with pytest.raises(UserError, match="not inside a git repository") as e:
        cm.open_range(tmp_path / "plain", "HEAD~1", "HEAD")
    assert e.value.exit_code == 2


def test_unknown_revision_names_the_option(repo):
    with pytest.raises(UserError, match=r"unknown revision 'nope' given to --bad"):
        cm.open_range(repo.root / "proj", "HEAD~2", "nope")
    with pytest.raises(UserError, match=r"--good"):
        cm.open_range(repo.root / "proj", "deadbeef" * 5, "HEAD")


def test_good_not_an_ancestor_of_bad(repo):
    with pytest.raises(UserError, match="not an ancestor") as e:
        cm.open_range(repo.root / "proj", "HEAD", "HEAD~3")
    assert "swap --good and --bad" in e.value.render()
    repo.git("checkout", "-q", "-b", "side", repo.commits[2])
    side = repo.commit("side work", {"proj/other.py": "x = 1\n"})
    repo.git("checkout", "-q", "main")
    with pytest.raises(UserError, match="not an ancestor") as e:
        cm.open_range(repo.root / "proj", side, "main")
    assert "descends from" in e.value.render()


def test_same_commit_twice(repo):
    with pytest.raises(UserError, match="same commit"):
        cm.open_range(repo.root / "proj", "HEAD", "main")


def test_uncommitted_project_directory_is_an_error(repo):
    (repo.root / "newproj").mkdir()
    (repo.root / "newproj" / "repro.py").write_text("print(1)\n")
    with pytest.raises(UserError, match="not committed") as e:
        cm.open_range(repo.root / "newproj", "HEAD~1", "HEAD")
    assert "commit the project first" in e.value.render()


def test_merge_on_the_first_parent_line_is_one_step(repo):
    repo.git("checkout", "-q", "-b", "side", repo.commits[5])
    repo.commit("side 1", {"proj/side.py": "a = 1\n"})
    repo.commit("side 2", {"proj/side.py": "a = 2\n"})
    repo.git("checkout", "-q", "main")
    repo.commit("main 6", {"proj/repro.py": "print('v6')\n"})
    repo.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = repo.git("rev-parse", "HEAD").strip()
    rng = cm.open_range(repo.root / "proj", repo.commits[5], "HEAD")
    assert [c.subject for c in rng.commits] == ["change 5", "main 6", "merge side"]
    assert rng.bad.sha == merge


# -- materialize: a copy of the committed project, the repository untouched --


def test_materialize_copies_the_project_as_committed_and_touches_nothing(repo, tmp_path):
    (repo.root / "proj" / "repro.py").write_text("print('uncommitted')\n")
    (repo.root / "proj" / "untracked.py").write_text("u = 1\n")
    before = repo.snapshot("proj/repro.py", "proj/untracked.py")
    git_dir_before = _tree_digest(repo.root / ".git")

    dest = cm.materialize(repo.root, repo.commits[2], "proj", tmp_path / "co")
    assert sorted(p.name for p in dest.iterdir()) == ["repro.py"]
    assert (dest / "repro.py").read_text() == "print('v2')\n"
    root_copy = cm.materialize(repo.root, repo.commits[0], ".", tmp_path / "co-root")
    assert (root_copy / "README").read_text() == "hi\n"
    assert (root_copy / "proj" / "repro.py").read_text() == "print('v0')\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("co")) == ["co", "co-root"]

    assert repo.snapshot("proj/repro.py", "proj/untracked.py") == before
    assert _tree_digest(repo.root / ".git") == git_dir_before


def test_materialize_a_missing_directory_fails_cleanly(repo, tmp_path):
    repo.commit("add other", {"other/x.py": "x = 1\n"})
    with pytest.raises(TfreproError, match="cannot check out 'other'"):
        cm.materialize(repo.root, repo.commits[0], "other", tmp_path / "co")


def _tree_digest(root: Path) -> dict[str, bytes]:
    # git status refreshes .git/index stat data; the snapshot() calls above
    # already did, so this compares the bytes materialize could have written.
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- state directory and leftovers ---------------------------------------------


def test_state_dir_is_invisible_to_git_status(repo):
    before = repo.git("status", "--porcelain", "--untracked-files=all")
    state = StateDir.of(repo.root / "proj").ensure()
    (state / "runs" / "x").mkdir(parents=True)
    (state / "runs" / "x" / "result.json").write_text("{}")
    assert repo.git("status", "--porcelain", "--untracked-files=all") == before


def test_leftover_checkouts_of_dead_runs_are_removed(repo, tmp_path):
    sd = StateDir.of(repo.root / "proj")
    state = sd.ensure()
    dead = state / cm.CHECKOUTS_DIR / "999999999-1"  # no such pid
    (dead / "abc").mkdir(parents=True)
    (dead / MARK).write_text("1\n")  # made by tfrepro (its record)
    foreign = state / cm.CHECKOUTS_DIR / "999999999-2"  # no record of ours: never deleted
    foreign.mkdir()
    alive = state / cm.CHECKOUTS_DIR / "999999999-3"  # its run still holds its lock, whatever its name says
    alive.mkdir(parents=True)
    fd = hold(alive, MARK)  # marked as ours and locked, as a live run's checkout is
    reused = state / cm.CHECKOUTS_DIR / f"{os.getppid()}-1"  # a live pid, but no run holds the lock
    reused.mkdir(parents=True)
    (reused / MARK).write_text("1\n")
    try:
        with cm.Checkouts(sd) as co:
            assert not dead.exists() and not reused.exists()
            assert alive.exists() and foreign.exists()
            path = co.checkout(cm.open_range(repo.root / "proj", "HEAD~1", "HEAD"), repo.commits[3])
            assert (path / "repro.py").read_text() == "print('v3')\n"
        assert not co.dir.exists()
    finally:
        os.close(fd)


def test_good_on_a_merged_side_branch_enters_the_mainline_at_the_merge(repo):
    repo.git("checkout", "-q", "-b", "side", repo.commits[2])
    side = repo.commit("side 1", {"proj/side.py": "a = 1\n"})
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
    repo.commit("after merge", {"proj/repro.py": "print('v9')\n"})
    rng = cm.open_range(repo.root / "proj", side, "main")
    assert [c.subject for c in rng.commits] == ["side 1", "merge side", "after merge"]
