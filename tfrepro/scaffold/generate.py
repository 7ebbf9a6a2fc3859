"""`tfrepro new`: a baseline repro project from a template, committed in git
(and `tfrepro update`, at the end).

Everything a user can get wrong is checked before anything is written: the
destination, the template name, every `--data` key and value (copier's own
validators run on the answers too). The project is rendered into a temporary
directory next to the destination and moved into place only once it is
complete and committed, so a failure leaves nothing half-written.

The templates: the packaged ones, and the git-versioned copies copier works from.

Copier updates a project only from a template that sits at the root of a git
repository with PEP 440 version tags; an installed package folder is not one.
So each template is *assembled* from the package (its `copier.yml`, its shape
files under `shape/`, the shared catalog under `_shared/`) into a git
repository in a cache directory, one commit and one tag per template content:

    ~/.cache/tfrepro/templates/<name>/    tags: 1.0.0, 1.0.0.post1, 1.1.0, ...

The tag is the template's `VERSION`; content that changed without a version
bump gets the next `.postN` tag, so every tag names exactly one content and
old tags stay valid for `tfrepro update`. Invariant: HEAD's tree is the
assembled template of the current package, and HEAD carries a tag.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import VERSION_PATTERN, InvalidVersion, Version

from tfrepro.errors import TfreproError, UserError

PACKAGED_TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SHARED_DIR = "_shared"
SHAPE_DIR = "shape"
VERSION_FILE = "VERSION"
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".DS_Store")


@dataclass(frozen=True)
class TemplateRepo:
    """A template as copier sees it: a git repository and the tag to use."""

    name: str
    path: Path
    tag: str
    commit: str


def template_source() -> Path:
    """Where the templates are read from: $TFREPRO_TEMPLATES_DIR (template
    development), else the ones shipped in the package."""
    return Path(os.environ.get("TFREPRO_TEMPLATES_DIR") or PACKAGED_TEMPLATES).expanduser().resolve()


def cache_dir() -> Path:
    """The directory holding the git-versioned templates: under $TFREPRO_CACHE_DIR, else tfrepro's user cache."""
    from tfrepro.trials.envs import cache_root

    base = os.environ.get("TFREPRO_CACHE_DIR")
    return (Path(base) if base else cache_root()).expanduser().resolve() / "templates"


def available_templates() -> list[str]:
    root = template_source()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "copier.yml").is_file() and not p.name.startswith("_"))


def ensure_template_repo(name: str) -> TemplateRepo:
    """The git-versioned copy of template `name`, brought up to date with the
    package: a new commit and tag when the content changed."""
    import git

    src = template_source()
    if name not in (names := available_templates()):
        raise UserError(
            f"unknown template {name!r}", hint="templates: " + (", ".join(names) or f"(none found in {src})")
        )
    path = src / VERSION_FILE  # one version for all: they share the feature catalog
    try:
        version = path.read_text(encoding="utf-8").strip()
        Version(version)
    except (OSError, InvalidVersion) as e:
        raise TfreproError(f"{path}: not a readable PEP 440 version ({e})") from None
    root = cache_dir()
    repo_path = root / name
    root.mkdir(parents=True, exist_ok=True)
    # two `tfrepro new` at once must not both rebuild the same cache repo (closing the file releases the lock)
    with open(root / f".{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if repo_path.exists() and not (repo_path / ".git").is_dir():
            shutil.rmtree(repo_path)  # a half-built cache entry, never user data
        repo = git.Repo(repo_path) if (repo_path / ".git").is_dir() else git.Repo.init(repo_path)
        with repo.config_writer() as cw:  # copier's update runs git in here too
            cw.set_value("user", "name", "tfrepro")
            cw.set_value("user", "email", "tfrepro@localhost")
            cw.set_value("commit", "gpgsign", "false")
            cw.set_value("tag", "gpgsign", "false")
        # packaging's own pattern (a git tag holds no spaces, the only thing Version() also strips)
        versions = [Version(t.name) for t in repo.tags if re.fullmatch(VERSION_PATTERN, t.name, re.VERBOSE | re.I)]
        newest = max(versions, default=None)
        if newest is not None and Version(version) < newest and Version(version).base_version != newest.base_version:
            raise TfreproError(
                f"template version {version} is older than {newest}, already in {repo_path} "
                "(an older tfrepro sharing the cache of a newer one?): set TFREPRO_CACHE_DIR to a cache of its own"
            )
        for entry in repo_path.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        # the template laid out as copier expects it, in the emptied repository
        shutil.copytree(src / SHARED_DIR, repo_path / SHARED_DIR, ignore=_IGNORED)
        shutil.copytree(src / name, repo_path / SHAPE_DIR, ignore=_IGNORED)  # the shape files, copier.yml beside them
        (repo_path / SHAPE_DIR / "copier.yml").rename(repo_path / "copier.yml")
        shutil.copy2(src / VERSION_FILE, repo_path / VERSION_FILE)
        repo.git.add("--all", ".")
        if not repo.head.is_valid() or repo.is_dirty(index=True, working_tree=False):
            repo.git.commit("-m", f"template {name} {version}", "--allow-empty", "--no-verify")
        head = repo.head.commit
        tags = {t.name: t.commit.hexsha for t in repo.tags}
        tag = max((t for t, sha in tags.items() if sha == head.hexsha), key=Version, default=None)
        if tag is None:  # the version, else its first free .postN (one of len(tags) + 2 names is free)
            tag = next(t for t in [version, *(f"{version}.post{n}" for n in range(1, len(tags) + 2))] if t not in tags)
            repo.create_tag(tag, message=f"template {name} {tag}")
        return TemplateRepo(name=name, path=repo_path, tag=tag, commit=head.hexsha)


DEFAULT_TEMPLATE = "image"
ANSWERS_FILE = ".copier-answers.yml"


@dataclass(frozen=True)
class NewProject:
    path: Path
    template: str
    version: str
    commit: str  # the baseline commit in the new project's git repository
    answers: Mapping[str, Any] = field(default_factory=dict)

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(self.answers.get("features") or ())


def parse_data_items(items: Iterable[str]) -> dict[str, str]:
    """`["batch_size=64", "features=prefetch,cache"]` -> {"batch_size": "64", ...}."""
    data: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"bad --data item {item!r}", hint="write KEY=VALUE, e.g. --data batch_size=64")
        data[key] = value.strip()
    return data


def validate_data(data: Mapping[str, Any], repo: TemplateRepo) -> dict[str, Any]:
    """Answers given on the command line -> values copier accepts, or a
    UserError naming the key and what it accepts. Types and ranges are left
    to copier's validators (they know the dependencies between answers)."""
    from copier._template import load_template_config

    # the template's questions (name -> spec), as copier reads copier.yml
    config = load_template_config(repo.path / "copier.yml")
    specs = ((k, v if isinstance(v, dict) else {"default": v}) for k, v in config.items() if not k.startswith("_"))
    out: dict[str, Any] = {}
    askable = {k: s for k, s in specs if s.get("when") is not False}
    for key, value in data.items():
        if key not in askable:
            raise UserError(f"template {repo.name!r} has no question {key!r}", hint="questions: " + ", ".join(askable))
        spec = askable[key]
        choices = spec.get("choices")
        if isinstance(choices, dict):
            choices = list(choices.values())
        elif choices is not None:
            choices = [c[1] if isinstance(c, (list, tuple)) and len(c) == 2 else c for c in choices]
        if spec.get("multiselect"):
            items = value if isinstance(value, list) else [x.strip() for x in str(value).split(",") if x.strip()]
            unknown = [x for x in items if choices is not None and x not in choices]
            if unknown:
                raise UserError(
                    f"unknown {key}: {', '.join(unknown)}",
                    hint=f"choose among: {', '.join(map(str, choices or []))} (comma-separated; empty for none)",
                )
            out[key] = items
        else:
            if choices is not None and value not in choices and str(value) not in map(str, choices):
                raise UserError(
                    f"{key}={value!r} is not one of the choices",
                    hint=f"choose among: {', '.join(map(str, choices))}",
                )
            if choices is None and isinstance(value, str) and (bad := _BAD_TEXT.search(value)):
                raise UserError(
                    f"{key} must be one line of printable text; it holds {bad.group(0)!r} at position {bad.start()}",
                    hint=f"e.g. --data {key}=data/train.npz",
                )
            out[key] = _cast(key, value, spec.get("type", "str"))
    return out


# A free-text answer (a path) lands in Python source as a string literal: one
# line of text, nothing that splits a line (str.splitlines() knows more line
# breaks than \n), no NUL, no lone surrogate (undecodable bytes of argv).
_BAD_TEXT = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029\ud800-\udfff]")
# Larger than any sensible learning rate or other float answer; 1e300 is a typo.
MAX_FLOAT = 1e6


def _cast(key: str, value: Any, type_name: str) -> Any:
    casts = {"int": int, "float": float}
    if type_name not in casts or not isinstance(value, str):
        return value
    hint = f"e.g. --data {key}={'32' if type_name == 'int' else '0.001'}"
    try:
        number = casts[type_name](value)
    except ValueError:
        raise UserError(
            f"{key}={value!r} is not {'an integer' if type_name == 'int' else 'a number'}", hint=hint
        ) from None
    if type_name == "float" and not (math.isfinite(number) and abs(number) <= MAX_FLOAT):
        raise UserError(f"{key}={value!r} is not a finite number of at most {MAX_FLOAT:g}", hint=hint)
    return number


def check_destination(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UserError(
            "destination is not empty" if dest.is_dir() else "destination exists and is not a directory",
            path=dest,
            hint="give a new (or empty) directory: tfrepro never writes over existing files",
        )


def new_project(
    dest: str | Path,
    *,
    template: str = DEFAULT_TEMPLATE,
    data: Mapping[str, Any] | None = None,
    defaults: bool = True,
    files: Mapping[str, str | bytes] | None = None,
) -> NewProject:
    """Render `template` into `dest`, initialise git there and commit the
    baseline. `defaults=False` asks the unanswered questions on the terminal.
    `files` (relpath -> text or bytes) are written beside what the template
    renders, before the commit: the user's own script (`new --from`)."""
    dest = Path(dest).expanduser().absolute()
    check_destination(dest)
    repo = ensure_template_repo(template)  # checks the template's name first
    answers_in = validate_data(data or {}, repo)

    created_parent = next((p for p in reversed(dest.parents) if not p.exists()), None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tfrepro-new-", dir=dest.parent))
    try:
        out = staging / dest.name
        answers = _run_copier(repo, out, answers_in, defaults)
        for rel, content in (files or {}).items():  # beside what the template rendered, never over it
            if (out / rel).exists() or Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise TfreproError(f"{rel}: would overwrite a template file or leave the project")
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))  # as given
        import git

        baseline = git.Repo.init(out)
        baseline.git.add("--all", ".")
        try:
            commit = baseline.index.commit(f"tfrepro new: baseline from template {template} {repo.tag}").hexsha
        except ValueError as e:  # no usable identity: gitpython's fallback failed
            raise TfreproError(f"could not commit the baseline: {e}") from None
        check_destination(dest)  # nobody wrote there meanwhile
        out.rename(dest)  # over an empty directory too (POSIX rename)
    except BaseException:
        if created_parent is not None:
            shutil.rmtree(created_parent, ignore_errors=True)  # the directories this call made
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    import yaml

    try:
        recorded = yaml.safe_load((dest / ANSWERS_FILE).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        recorded = {}
    return NewProject(
        path=dest,
        template=template,
        version=str(recorded.get("_commit", repo.tag)),
        commit=commit,
        answers={k: v for k, v in recorded.items() if not k.startswith("_")} or answers,
    )


def _run_copier(repo: TemplateRepo, out: Path, answers_in: Mapping[str, Any], defaults: bool) -> Mapping[str, Any]:
    """copier renders the template into `out` -> the answers it used; its
    errors as ours (a bad answer is a UserError)."""
    import copier
    from copier.errors import CopierError, UserMessageError

    try:
        worker = copier.run_copy(
            str(repo.path),
            out,
            data=dict(answers_in),
            vcs_ref=repo.tag,
            defaults=defaults,
            quiet=True,
            cleanup_on_error=True,
        )
    except (ValueError, TypeError, UserMessageError) as e:
        # copier's validators say what is expected
        raise UserError(str(e).strip().replace("Validation error for question ", "invalid answer to ")) from None
    except KeyboardInterrupt:
        raise TfreproError("interrupted: nothing was written") from None
    except CopierError as e:
        raise TfreproError(f"copier failed: {e}") from e
    return {k: v for k, v in worker.answers.combined.items() if not str(k).startswith("_")}


# -- `tfrepro update`: move a project to the current template version.
#
# Copier's update is a three-way merge: it renders the project's recorded
# template version with the recorded answers, diffs that against the project
# (the user's edits), renders the new version and applies the diff on top. It
# needs the project committed in git and the old version still available as a
# tag of the template repository; every precondition is checked here first so
# the message says why an update cannot run and what to do.
#
# The result is left uncommitted, for the user to review (`git diff`).

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
