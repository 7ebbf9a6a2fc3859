"""How `Project.load` finds a project and its features, and which of them
are candidates.

- `locate`: the path the user gave, a project directory or a plain script
  (`tfrepro bisect train.py`): a script belongs to the nearest enclosing
  project (`projectfiles.find_root`) and becomes its entry;
- `marked_sources`: the files that carry feature-block markers (Contract 1);
- `detected_sources`: zero-edit mode, when no file has a marker: the entry
  script and the project modules it imports, annotated in memory by the
  annotate recognisers (`annotate/zeroedit.py`); nothing is written;
- `selection`: `--only` / `--skip`, the features that are not candidates;
- `with_script_args`: the script's own arguments (`tfrepro bisect train.py
  -- --epochs 3`), appended to the command every trial runs.

Values in, values out: `project.py` builds the `Project` from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tfrepro import catalog
from tfrepro import features as fb
from tfrepro.errors import UserError
from tfrepro.projectfiles import check_root, find_root, imported_files

if TYPE_CHECKING:
    from tfrepro.annotate.zeroedit import Detection


def locate(path: str | Path) -> tuple[Path, str | None]:
    """(the project root, the entry a script path names or None): `path` is
    a project directory or its `.py` training script."""
    p = Path(path)
    if not p.exists():
        raise UserError("no such file or directory", path=p, hint="give the project directory (or its .py entry file)")
    if not p.is_file():
        root = p.resolve()
        check_root(root)
        return root, None
    if p.suffix != ".py":
        raise UserError(
            "not a Python file or a project directory",
            path=p,
            hint="give the project directory, or the training script ending in .py",
        )
    # The script's project: the nearest tfrepro.toml/.git/pyproject.toml
    # above it, else its folder; never $HOME or / (projectfiles.find_root).
    root = find_root(p)
    return root, p.resolve().relative_to(root).as_posix()


def marked_sources(root: Path, files: Iterable[str]) -> dict[str, fb.SourceFile]:
    """relpath -> parsed file, for every .py file with at least one feature
    block (a malformed marker is a UserError naming file:line)."""
    sources: dict[str, fb.SourceFile] = {}
    nested = {rel.rsplit("/", 1)[0] for rel in files if rel.endswith("/tfrepro.toml")}  # projects of their own
    for rel in files:
        if not rel.endswith(".py") or any(rel.startswith(n + "/") for n in nested):
            continue  # a project of its own below this one (`tfrepro new sub`) marks its own features
        full = root / rel
        data = full.read_bytes()
        if b"tfrepro:" not in data:  # no marker: never decoded, whatever its encoding
            continue
        src, encoding = fb.decode_source(data, str(full))
        parsed = fb.parse(src, str(full), encoding)
        if parsed.blocks:
            sources[rel] = parsed
    return sources


def detected_sources(
    root: Path, entry: str | None, command: Sequence[str] | None, files: list[str]
) -> tuple[dict[str, fb.SourceFile], Detection]:
    """Zero-edit: the feature blocks of the entry script (`[trial] entry` or
    the `.py` files of `command`) and the modules it imports, annotated in
    memory; every non-test `.py` file when the entry is unknown."""
    from tfrepro.annotate.zeroedit import default_targets, detect, entry_scripts

    entries = entry_scripts(entry, command, files)
    targets = imported_files(root, entries, files) if entries else default_targets(files)
    detection = detect(root, targets)
    return {rel: fb.parse(t, str(root / rel)) for rel, t in detection.texts.items()}, detection


def selection(
    names: Sequence[str], only: Iterable[str] | None, skip: Iterable[str] | None, *, root: Path
) -> dict[str, str]:
    """feature -> why it is not a candidate: those not named in `only` (all
    are when None), and those named in `skip`. Each item is a feature name, a
    name prefix (`callback` for callback_*) or a catalog kind (`dataset`); one
    that matches no feature is a UserError."""

    def match(item: str) -> set[str]:
        got = {n for n in names if n == item or n.startswith(item + "_") or catalog.kind_of(n) == item}
        if not got:
            raise UserError(
                f"no feature matches {item!r}",
                path=root,
                hint="known features: " + (", ".join(names) or "(none)"),
            )
        return got

    keep = set(names) if only is None else set().union(*(match(x) for x in only))
    skipped = set().union(*(match(x) for x in skip or ()))
    return dict.fromkeys(set(names) - keep, "not in --only") | dict.fromkeys(skipped, "--skip")


def with_script_args(command: Sequence[str] | None, entry: str, args: Sequence[str]) -> tuple[str, ...]:
    """The trial command with the script's arguments after it, as `git
    bisect run` passes its command's: `[trial] command` + args, or
    `python ENTRY` + args (`Project.load` calls it only with args)."""
    return (*(command if command is not None else ("python", entry)), *args)
