"""Submodules in commit mode: each gitlink of the project's tree is copied
out of the submodule's own object database (`.git/modules/<name>`, or the
submodule checkout's `.git`), with a private index, never written to; a
submodule whose commit is not in any of them raises `TfreproError` (the
commit is untestable, with the reason and the fix). LFS files stay pointers
(`gitcopy.NO_LFS_SMUDGE`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from tfrepro.errors import TfreproError

Materialize = Callable[..., Path]


def _git(git_dir: Path | None, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith("GIT_CONFIG")}
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def gitlinks(repo: Path, treeish: str, git_dir: Path | None = None) -> list[tuple[str, str]]:
    """(path relative to `treeish`, commit sha) of every submodule in it."""
    out = _git(git_dir, repo, "ls-tree", "-r", "-z", treeish)
    records = [rec.partition("\t") for rec in out.stdout.split("\0")]
    return [(path, meta.split()[2]) for meta, _, path in records if meta.startswith("160000 ")]


def _names(repo: Path, sha: str, git_dir: Path | None) -> dict[str, str]:
    """Submodule path (from the repository root) -> name, from `.gitmodules` at `sha`."""
    out = _git(git_dir, repo, "config", "--blob", f"{sha}:.gitmodules", "--get-regexp", r"^submodule\..*\.path$")
    pairs = [line.partition(" ") for line in out.stdout.splitlines()]
    return {path: key[len("submodule.") : -len(".path")] for key, _, path in pairs}


def _candidates(repo: Path, git_dir: Path | None, name: str, rootrel: str) -> list[Path]:
    common = _git(git_dir, repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
    found = [Path(common) / "modules" / name] if common else []
    dotgit = repo / rootrel / ".git"
    if dotgit.is_dir():
        found.append(dotgit)
    elif dotgit.is_file():
        text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            found.append((dotgit.parent / text[len("gitdir:") :].strip()).resolve())
    return [p for p in found if p.is_dir()]


def checkout_submodules(
    repo: Path, sha: str, relpath: str, dest: Path, materialize: Materialize, git_dir: Path | None = None
) -> None:
    """Fill each submodule directory of `dest` (the project at `sha`, read
    from `git_dir` when given: a submodule's own, for nested ones)."""
    treeish = sha if relpath == "." else f"{sha}:{relpath}"
    cwd = dest if git_dir is not None else repo
    links = gitlinks(cwd, treeish, git_dir)
    if not links:
        return
    names = _names(cwd, sha, git_dir)
    for path, sub_sha in links:
        rootrel = path if relpath == "." else f"{relpath}/{path}"
        name = names.get(rootrel, rootrel)
        for sub_dir in _candidates(cwd, git_dir, name, rootrel):
            if _git(sub_dir, cwd, "cat-file", "-e", f"{sub_sha}^{{commit}}").returncode == 0:
                materialize(cwd, sub_sha, ".", dest / path, git_dir=sub_dir)
                break
        else:
            raise TfreproError(
                f"submodule {rootrel!r} at {sub_sha[:12]} is not in this repository's objects "
                "(commit mode never fetches): run `git submodule update --init --recursive` once, then bisect again"
            )
