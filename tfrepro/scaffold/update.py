"""`tfrepro update`: move a project to the current template version.

Copier's update is a three-way merge: it renders the project's recorded
template version with the recorded answers, diffs that against the project
(the user's edits), renders the new version and applies the diff on top. It
needs the project committed in git and the old version still available as a
tag of the template repository; every precondition is checked here first so
the message says why an update cannot run and what to do.

The result is left uncommitted, for the user to review (`git diff`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfrepro.errors import TfreproError, UserError
from tfrepro.scaffold.generate import ANSWERS_FILE, available_templates, cache_dir, ensure_template_repo

CONFLICT_MARK = "<<<<<<< "


@dataclass(frozen=True)
class UpdateResult:
    path: Path
    template: str
    old_version: str
    new_version: str
    changed: tuple[str, ...] = ()  # files changed by the update (git status)
    conflicts: tuple[str, ...] = ()  # files holding conflict markers

    @property
    def up_to_date(self) -> bool:
        return self.old_version == self.new_version


def _load_answers(root: Path) -> tuple[dict[str, Any], str]:
    """The answers the project recorded, and the template it was made from, when this tfrepro ships it
    from the same cache."""
    import yaml

    if not root.is_dir():
        raise UserError("no such project directory", path=root)
    path = root / ANSWERS_FILE
    if not path.is_file():
        raise UserError(
            f"no {ANSWERS_FILE} here, so no record of the template and answers this project came from",
            path=root,
            hint="tfrepro update works on projects made by `tfrepro new`; if this is one, restore the file "
            f"from git (git checkout HEAD -- {ANSWERS_FILE})",
        )
    try:
        answers = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise UserError(
            f"unreadable answers file: {e}", path=path, hint=f"restore it from git: git checkout HEAD -- {ANSWERS_FILE}"
        ) from None
    for key in ("_src_path", "_commit"):
        if not answers.get(key):
            raise UserError(
                f"the answers file has no {key}",
                path=path,
                hint=f"restore it from git (git checkout HEAD -- {ANSWERS_FILE}); never edit it by hand",
            )
    src_path = Path(str(answers["_src_path"]))
    name = src_path.name
    if name not in available_templates():
        raise UserError(
            f"the project comes from template {name!r} ({src_path}), which this tfrepro does not ship",
            path=path,
            hint="templates: " + ", ".join(available_templates()),
        )
    expected = cache_dir() / name
    if src_path.resolve() != expected:
        raise UserError(
            f"the project was made from the template cache {src_path}, this tfrepro uses {expected}",
            path=path,
            hint=f"run with TFREPRO_CACHE_DIR set to the cache the project was made with ({src_path.parent.parent})",
        )
    return answers, name


def _dirty_files(repo, root: Path) -> list[str]:
    lines = repo.git.status("--porcelain", "--untracked-files=all", "--", str(root)).splitlines()
    return [line[3:] for line in lines if line.strip()]


def update_project(path: str | Path = ".") -> UpdateResult:
    """Update the project at `path` to the current version of its template,
    keeping the user's committed edits (conflicts are left inline)."""
    root = Path(path).expanduser().resolve()
    answers, name = _load_answers(root)
    import git

    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UserError(
            "not a git repository: copier updates by merging into committed files",
            path=root,
            hint="git init && git add -A && git commit -m 'my repro', then run tfrepro update again",
        ) from None
    if dirty := _dirty_files(repo, root):
        shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
        raise UserError(
            f"uncommitted changes ({shown}): the update merges the new template into your committed files",
            path=root,
            hint="commit them first (git add -A && git commit -m 'my edits'), then run tfrepro update again",
        )
    template = ensure_template_repo(name)
    old = str(answers["_commit"])
    try:  # the recorded template version must be in the cache: the three-way merge's base
        git.Repo(template.path).git.rev_parse("--verify", f"{old}^{{commit}}")
    except git.GitCommandError:
        raise UserError(
            f"template version {old} (recorded in {ANSWERS_FILE}) is not in the template cache {template.path}",
            path=root / ANSWERS_FILE,
            hint="the cache was rebuilt since the project was made, so the three-way merge has no base: "
            "make a fresh project with tfrepro new and carry your edits over",
        ) from None
    if old == template.tag:
        return UpdateResult(path=root, template=name, old_version=old, new_version=old)

    import copier
    from copier.errors import CopierError, UserMessageError

    try:
        copier.run_update(
            root,
            vcs_ref=template.tag,
            defaults=True,  # new questions take their defaults; old answers are kept
            skip_answered=True,
            overwrite=True,
            quiet=True,
            conflict="inline",
        )
    except (UserMessageError, ValueError) as e:
        raise UserError(f"copier could not update: {e}", path=root) from None
    except CopierError as e:
        raise TfreproError(f"copier failed to update {root}: {e}") from e
    changed = tuple(_dirty_files(repo, root))
    conflicts = tuple(f for f in changed if _has_conflict(Path(repo.working_tree_dir) / f))
    return UpdateResult(
        path=root, template=name, old_version=old, new_version=template.tag, changed=changed, conflicts=conflicts
    )


def _has_conflict(path: Path) -> bool:
    try:
        return path.is_file() and any(
            line.startswith(CONFLICT_MARK) for line in path.read_text(encoding="utf-8").splitlines()
        )
    except (OSError, UnicodeDecodeError):
        return False
