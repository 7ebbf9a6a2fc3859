"""Zero-edit mode: the feature blocks of an unmarked project, found by the
annotate recognisers and kept in memory (nothing is written to the user's
files). `Project.load` calls `detect` (through `project.detected_sources`) when no file
of the project has a marker; trials then render their variants from the
annotated texts.

Which files: the trial's entry script and the project modules it imports
(transitively, as `import x` / `from x import y` resolve from the script's
directory or the project root); when the entry is unknown, every `.py` file
that is not a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tfrepro.annotate.model import Found, Skipped


@dataclass(frozen=True)
class Detection:
    texts: dict[str, str]  # relpath -> annotated text (only files that changed)
    found: tuple[Found, ...]  # Found.path is the relpath, Found.line a line of the original file
    skipped: tuple[Skipped, ...]

    @property
    def affects_loss(self) -> frozenset[str]:
        return frozenset(f.name for f in self.found if f.affects_loss)


def entry_scripts(entry: str | None, command: Sequence[str] | None, files: Iterable[str]) -> list[str]:
    """The project's entry scripts (relpaths) from `[trial] entry` or `command`."""
    known = set(files)
    if command is None:
        return [entry] if entry in known else []
    out = [c for c in command if c.endswith(".py") and c in known]
    for i, c in enumerate(command[:-1]):
        if c == "-m":
            mod = command[i + 1].replace(".", "/")
            out += [m for m in (f"{mod}.py", f"{mod}/__main__.py") if m in known]
    return out


def default_targets(files: Iterable[str]) -> list[str]:
    """Every `.py` file that is not a test (when the entry is unknown)."""
    return [
        f
        for f in files
        if f.endswith(".py") and not f.startswith("tests/") and not Path(f).name.startswith(("test_", "conftest"))
    ]


def detect(root: Path, targets: Sequence[str]) -> Detection:
    """Run the annotator over `targets` (relpaths under `root`) in memory."""
    from tfrepro.annotate import annotate, relpath

    if not targets:
        return Detection({}, (), ())
    result = annotate([root / t for t in targets])
    rel = {r.path: relpath(r.path, root) for r in result.files}
    texts = {rel[r.path]: r.annotated for r in result.files if r.changed}
    found = tuple(replace(f, path=rel[r.path]) for r in result.files for f in r.found)
    return Detection(texts, found, tuple(replace(s, path=relpath(s.path, root)) for s in result.skipped))
