"""The packaged templates, and the git-versioned copies copier works from.

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
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

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


def template_source(source: str | Path | None = None) -> Path:
    """Where the templates are read from: `source`, else $TFREPRO_TEMPLATES_DIR
    (template development), else the ones shipped in the package."""
    chosen = source or os.environ.get("TFREPRO_TEMPLATES_DIR") or PACKAGED_TEMPLATES
    return Path(chosen).expanduser().resolve()


def cache_dir() -> Path:
    """The directory holding the git-versioned templates: under $TFREPRO_CACHE_DIR, else tfrepro's user cache."""
    from tfrepro.trials.envs import cache_root

    base = os.environ.get("TFREPRO_CACHE_DIR")
    return (Path(base) if base else cache_root()).expanduser().resolve() / "templates"


def available_templates(source: str | Path | None = None) -> list[str]:
    root = template_source(source)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "copier.yml").is_file() and not p.name.startswith("_"))


def check_template(name: str, source: str | Path | None = None) -> None:
    names = available_templates(source)
    if name not in names:
        raise UserError(
            f"unknown template {name!r}",
            hint="templates: " + (", ".join(names) or f"(none found in {template_source(source)})"),
        )


def assemble(name: str, source: str | Path | None, dest: Path) -> None:
    """Lay the template `name` (checked: `check_template`) out as copier
    expects it, in `dest` (empty but for `.git`)."""
    src = template_source(source)
    shutil.copytree(src / SHARED_DIR, dest / SHARED_DIR, ignore=_IGNORED)
    shutil.copytree(src / name, dest / SHAPE_DIR, ignore=_IGNORED)  # the shape files, copier.yml beside them
    (dest / SHAPE_DIR / "copier.yml").rename(dest / "copier.yml")
    shutil.copy2(src / VERSION_FILE, dest / VERSION_FILE)


def ensure_template_repo(name: str, *, source: str | Path | None = None) -> TemplateRepo:
    """The git-versioned copy of template `name`, brought up to date with the
    package: a new commit and tag when the content changed."""
    import git

    check_template(name, source)
    path = template_source(source) / VERSION_FILE  # one version for all: they share the feature catalog
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
        if (repo_path / ".git").is_dir():
            repo = git.Repo(repo_path)
        else:
            if repo_path.exists():
                shutil.rmtree(repo_path)  # a half-built cache entry, never user data
            repo = git.Repo.init(repo_path)
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
        assemble(name, source, repo_path)
        repo.git.add("--all", ".")
        if not repo.head.is_valid() or repo.is_dirty(index=True, working_tree=False):
            repo.git.commit("-m", f"template {name} {version}", "--allow-empty", "--no-verify")
        head = repo.head.commit
        tags = {t.name: t.commit.hexsha for t in repo.tags}
        tag = max((t for t, sha in tags.items() if sha == head.hexsha), key=Version, default=None)
        if tag is None:
            tag, n = version, 0
            while tag in tags:
                n += 1
                tag = f"{version}.post{n}"
            repo.create_tag(tag, message=f"template {name} {tag}")
        return TemplateRepo(name=name, path=repo_path, tag=tag, commit=head.hexsha)
