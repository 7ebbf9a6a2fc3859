"""Issue 24, commit mode: git-lfs's smudge never runs (no download, no write
under `.git`: pointer files stay pointers), and submodules are copied out of
their own object databases, or the commit is untestable with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gitrepo import GitRepo, isolated_git_env

from tfrepro.bisect import gitcopy as cm
from tfrepro.errors import TfreproError

POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 31000000\n"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    isolated_git_env(h, monkeypatch)
    return h


def test_lfs_smudge_never_runs_and_pointer_files_stay_pointers(tmp_path, home):
    repo = GitRepo.init(tmp_path / "repo", home)
    # A stand-in for git-lfs: its smudge "downloads" into .git/lfs/objects.
    smudge = "sh -c 'mkdir -p .git/lfs/objects && echo fetched > .git/lfs/objects/x; echo REAL-31MB-CONTENT'"
    repo.git("config", "filter.lfs.smudge", smudge)
    repo.git("config", "filter.lfs.clean", "cat")
    repo.git("config", "filter.lfs.required", "true")
    repo.commit("data", {".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n", "data.bin": POINTER})
    shutil.rmtree(repo.root / ".git" / "lfs", ignore_errors=True)  # the commit's own clean/smudge

    dest = cm.materialize(repo.root, repo.commits[-1], ".", tmp_path / "out" / "copy")

    assert (dest / "data.bin").read_text() == POINTER
    assert not (repo.root / ".git" / "lfs").exists()


def _repo_with_submodule(tmp_path: Path, home: Path) -> tuple[GitRepo, GitRepo]:
    sub = GitRepo.init(tmp_path / "sub", home)
    sub.commit("lib", {"helpers.py": "VALUE = 42\n"})
    main = GitRepo.init(tmp_path / "main", home)
    main.commit("script", {"repro.py": "from libs.sub.helpers import VALUE\nprint(VALUE)\n"})
    main.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub.root), "libs/sub")
    main.commit("add the submodule")
    return main, sub


def test_a_submodule_is_copied_from_the_repositorys_own_objects(tmp_path, home):
    main, _ = _repo_with_submodule(tmp_path, home)
    before = main.snapshot()

    dest = cm.materialize(main.root, main.commits[-1], ".", tmp_path / "out" / "copy")

    assert (dest / "libs" / "sub" / "helpers.py").read_text() == "VALUE = 42\n"
    assert not (dest / "libs" / "sub" / ".git").exists()
    assert main.snapshot() == before


def test_a_submodule_whose_objects_are_missing_makes_the_commit_untestable_with_the_reason(tmp_path, home):
    main, sub = _repo_with_submodule(tmp_path, home)
    shutil.rmtree(main.root / ".git" / "modules")
    shutil.rmtree(main.root / "libs" / "sub")

    with pytest.raises(TfreproError) as e:
        cm.materialize(main.root, main.commits[-1], ".", tmp_path / "out" / "copy")

    assert "submodule 'libs/sub'" in str(e.value) and "git submodule update --init" in str(e.value)
