"""The git edge of commit bisection: validated ranges, read-only checkouts.

How a commit is checked out, and why not `git worktree`:
each tried commit is copied out of the object database with a *private*
index: `GIT_INDEX_FILE=<copy>.index git read-tree <sha>:<project dir>` and
`git checkout-index -a --prefix=<dest>/`. This reads `.git` and writes only
that index file and the destination directory, both under `.tfrepro/`, so:

- the user's working tree, index, current branch, HEAD, stash and uncommitted
  changes are never written, whatever happens (no `checkout`, no `stash`);
- unlike `git worktree add`, nothing is registered in `.git/worktrees`, so a
  bisect killed with SIGKILL leaves no metadata behind that `git worktree
  list` would show, and no `git worktree prune` (which would also prune the
  user's own stale worktrees) is ever needed;
- unlike `git archive`, checkout-index applies the smudge/eol filters and
  ignores `export-ignore`, so the copy is the file tree a checkout would give,
  except git-lfs's smudge (`NO_LFS_SMUDGE`): LFS files stay pointer files;
- submodules are copied the same way from their own object databases
  (`.git/modules/<name>`, or the submodule checkout's `.git`; `materialize`);
  one whose commit is not in any of them makes the commit untestable, with that
  reason and the fix.

Copies live in `<project>/.tfrepro/checkouts/<pid>-<time>/<sha>/` (the state
directory holds a `.gitignore` of `*`, so `git status` never shows it) and are
removed after their trial; directories left by a run that was killed are
removed at the start of the next run (`StateDir.sweep_checkouts`: their lock is free).

gitpython is imported lazily (`tfrepro --help` must stay instant).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro.errors import TfreproError, UserError

if TYPE_CHECKING:
    from tfrepro.trials.state import StateDir

CHECKOUTS_DIR = "checkouts"
# git-lfs's smudge filter downloads (network) into `.git/lfs/objects` (a write
# under `.git`): commit mode never runs it, so LFS files stay pointer files.
# GIT_LFS_SKIP_SMUDGE for git-lfs itself; the config (git >= 2.31) empties the
# filter whatever program it names.
NO_LFS_SMUDGE = {
    "GIT_LFS_SKIP_SMUDGE": "1",
    "GIT_CONFIG_COUNT": "3",
    "GIT_CONFIG_KEY_0": "filter.lfs.smudge",
    "GIT_CONFIG_VALUE_0": "",
    "GIT_CONFIG_KEY_1": "filter.lfs.process",
    "GIT_CONFIG_VALUE_1": "",
    "GIT_CONFIG_KEY_2": "filter.lfs.required",
    "GIT_CONFIG_VALUE_2": "false",
}


@dataclass(frozen=True)
class CommitInfo:
    """One commit as a result shows it (Contract 4 `commit`, `tried`)."""

    sha: str
    subject: str
    author: str
    date: str  # author date, ISO 8601 with offset

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class CommitRange:
    """A validated `--good/--bad` range.

    Invariants: `commits[0]` is the good end, `commits[-1]` the bad end, each
    one a first-parent descendant of the one before it (`git rev-list
    --first-parent --ancestry-path good..bad`, oldest first). `relpath` is the
    project directory relative to the repository root ("." for the root).
    """

    repo_root: Path
    relpath: str
    commits: tuple[CommitInfo, ...]

    @property
    def good(self) -> CommitInfo:
        return self.commits[0]

    @property
    def bad(self) -> CommitInfo:
        return self.commits[-1]


def _git_module():
    try:
        import git
    except ImportError as e:  # gitpython raises ImportError when no git executable is found
        raise TfreproError(f"commit mode needs git and gitpython: {str(e).splitlines()[0]}") from None
    return git


def _info(commit: Any) -> CommitInfo:
    subject = (commit.message or "").strip().splitlines()
    return CommitInfo(
        sha=commit.hexsha,
        subject=subject[0] if subject else "",
        author=f"{commit.author.name} <{commit.author.email}>",
        date=commit.authored_datetime.isoformat(),
    )


SHALLOW_HINT = (
    "the clone is shallow (its history stops at a cut-off commit): run `git fetch --unshallow` "
    "(or `git fetch --deepen=N`) to get the commits up to --good, then try again"
)


def is_shallow(repo: Any) -> bool:
    """A shallow clone (`git clone --depth N`): history beyond its boundary is
    missing, so an older --good cannot be found or reached."""
    return (Path(repo.common_dir) / "shallow").is_file()


def _resolve(repo: Any, rev: str, option: str) -> Any:
    git = _git_module()
    try:
        return repo.commit(rev)
    except (git.BadName, git.BadObject, ValueError, git.GitCommandError):
        hint = "give a commit sha, branch or tag that exists in this repository (`git log --oneline` lists them)"
        shallow = is_shallow(repo)
        raise UserError(
            f"unknown revision {rev!r} given to {option}" + (" (this clone is shallow)" if shallow else ""),
            hint=SHALLOW_HINT if shallow else hint,
        ) from None


def open_range(path: str | Path, good: str, bad: str) -> CommitRange:
    """Validate `--good/--bad` for the project at `path` (UserError, exit 2).

    Bad input: not a git repository, unknown revisions, good == bad, good not
    an ancestor of bad, and the one case where the user's uncommitted state
    matters: the project directory is not committed at the bad end (the
    bisect only ever runs committed code).
    """
    git = _git_module()
    try:  # `path` exists: `project.locate` checked it
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(
            "not inside a git repository",
            path=Path(path),
            hint="commit mode (--good/--bad) bisects the history of a git repository; "
            "without --good/--bad, `tfrepro bisect` bisects the features instead",
        ) from None
    if repo.bare or repo.working_tree_dir is None:
        raise UserError("a bare repository has no project to run", path=Path(path))
    root = Path(repo.working_tree_dir).resolve()
    project = Path(path).resolve()
    relpath = project.relative_to(root).as_posix() if project != root else "."
    good_c = _resolve(repo, good, "--good")
    bad_c = _resolve(repo, bad, "--bad")
    if good_c.hexsha == bad_c.hexsha:
        raise UserError(
            f"--good {good} and --bad {bad} are the same commit ({good_c.hexsha[:12]})",
            hint="give a good commit older than the bad one",
        )
    if not repo.is_ancestor(good_c, bad_c):
        hint = (
            "they are the other way round: swap --good and --bad"
            if repo.is_ancestor(bad_c, good_c)
            else SHALLOW_HINT
            if is_shallow(repo)
            else "bisect along one line of history: pick a good commit that the bad one descends from"
        )
        raise UserError(
            f"--good {good} ({good_c.hexsha[:12]}) is not an ancestor of --bad {bad} ({bad_c.hexsha[:12]})",
            hint=hint,
        )
    try:
        committed = relpath == "." or (bad_c.tree / relpath).type == "tree"
    except KeyError:
        committed = False
    if not committed:
        raise UserError(
            f"the project directory {relpath!r} is not committed at --bad {bad}",
            path=project,
            hint="commit mode runs committed code only and never touches your working "
            "tree: commit the project first (or give a later --bad)",
        )
    shas = repo.git.rev_list("--first-parent", "--ancestry-path", f"{good_c.hexsha}..{bad_c.hexsha}")
    chain = [repo.commit(s) for s in reversed(shas.split())]
    return CommitRange(root, relpath, tuple(_info(c) for c in [good_c, *chain]))


def materialize(repo_root: Path, sha: str, relpath: str, dest: Path, git_dir: Path | None = None) -> Path:
    """Copy the project directory as committed at `sha` into `dest`.

    Reads the object database only: a private index file next to `dest`
    (so a killed run leaves it where its leftovers are cleaned), never the
    repository's index (see the module docstring). Raises TfreproError when
    the project directory does not exist at `sha`, or a submodule's commit
    is in none of its object databases. `git_dir`: read that object
    database instead (a submodule's).
    """
    git = _git_module()
    treeish = sha if relpath == "." else f"{sha}:{relpath}"
    dest.mkdir(parents=True, exist_ok=True)
    index = str(dest.with_name(dest.name + ".index"))
    try:
        g = git.Git(str(repo_root))
        env = {"GIT_INDEX_FILE": index, **NO_LFS_SMUDGE}
        if git_dir is not None:
            env.update(GIT_DIR=str(git_dir), GIT_WORK_TREE=str(dest))
        try:
            g.read_tree(treeish, env=env)
            g.checkout_index("-a", "-f", f"--prefix={dest.as_posix().rstrip('/')}/", env=env)
        except git.GitCommandError as e:
            raise TfreproError(f"cannot check out {relpath!r} at {sha[:12]}: {e.stderr.strip()}") from None
    finally:
        for leftover in (index, index + ".lock"):
            Path(leftover).unlink(missing_ok=True)
    # each submodule directory filled from the submodule's own objects
    # (`git_dir` set: a submodule's, for nested ones)
    cwd = dest if git_dir is not None else repo_root
    out = _git(git_dir, cwd, "ls-tree", "-r", "-z", treeish)  # (path relative to `treeish`, sha) of each gitlink
    records = [rec.partition("\t") for rec in out.stdout.split("\0")]
    links = [(path, meta.split()[2]) for meta, _, path in records if meta.startswith("160000 ")]
    names = _names(cwd, sha, git_dir) if links else {}
    for path, sub_sha in links:
        rootrel = path if relpath == "." else f"{relpath}/{path}"
        for sub_dir in _candidates(cwd, git_dir, names.get(rootrel, rootrel), rootrel):
            if _git(sub_dir, cwd, "cat-file", "-e", f"{sub_sha}^{{commit}}").returncode == 0:
                materialize(cwd, sub_sha, ".", dest / path, git_dir=sub_dir)
                break
        else:
            raise TfreproError(
                f"submodule {rootrel!r} at {sub_sha[:12]} is not in this repository's objects "
                "(commit mode never fetches): run `git submodule update --init --recursive` once, then bisect again"
            )
    return dest


# -- submodules: each gitlink of the project's tree, from its own objects --
def _git(git_dir: Path | None, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith("GIT_CONFIG")}
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _names(repo: Path, sha: str, git_dir: Path | None) -> dict[str, str]:
    """Submodule path (from the repository root) -> name, from `.gitmodules` at `sha`."""
    out = _git(git_dir, repo, "config", "--blob", f"{sha}:.gitmodules", "--get-regexp", r"^submodule\..*\.path$")
    pairs = [line.partition(" ") for line in out.stdout.splitlines()]
    return {path: key[len("submodule.") : -len(".path")] for key, _, path in pairs}


def _candidates(repo: Path, git_dir: Path | None, name: str, rootrel: str) -> list[Path]:
    common = _git(git_dir, repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
    found = [Path(common) / "modules" / name] if common else []
    dotgit = repo / rootrel / ".git"
    found.append(dotgit)  # a submodule checkout's own .git directory (a file is left out below)
    if dotgit.is_file():
        text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            found.append((dotgit.parent / text[len("gitdir:") :].strip()).resolve())
    return [p for p in found if p.is_dir()]


class Checkouts:
    """This run's checkout area: cleans old runs' leftovers on entry, its own
    directory on exit (also on exceptions and KeyboardInterrupt)."""

    def __init__(self, state: "StateDir") -> None:
        self.state = state
        self.dir = state.path / CHECKOUTS_DIR / f"{os.getpid()}-{time.time_ns()}"

    def __enter__(self) -> "Checkouts":
        self.state.sweep_checkouts()  # old runs' leftovers
        self.state.make_dir(self.dir)  # its parents too
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.state.release(self.dir)

    def checkout(self, rng: CommitRange, sha: str) -> Path:
        dest = self.dir / sha
        if dest.exists():
            shutil.rmtree(dest)
        return materialize(rng.repo_root, sha, rng.relpath, dest)

    def release(self, sha: str) -> None:
        shutil.rmtree(self.dir / sha, ignore_errors=True)
