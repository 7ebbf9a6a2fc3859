"""The bundle directory: what tfrepro may delete there, and nothing else.

A bundle records every file it wrote in `MANIFEST`. Rewriting a bundle
deletes exactly those files; a directory holding anything else (a `.git/`,
a `src/`, a thesis) is refused, never emptied. A bundle written before the
manifest existed is recognised by its fixed file names only.
"""

from __future__ import annotations

import json
from pathlib import Path

from tfrepro.errors import UserError

MANIFEST = ".tfrepro-bundle.json"
# What a bundle written before the manifest could hold (top-level names).
_LEGACY_NAMES = frozenset(
    {
        "repro.py",
        "reference.py",
        "reference",
        "ISSUE.md",
        "report.json",
        "result.json",
        "loss.png",
        "steps.png",
        "tensorboard",
        "repro.ipynb",
        "EXPLANATION.md",
    }
)


def prepare(out: Path) -> Path:
    """`out`, resolved, existing and empty: an earlier bundle's own files are
    deleted, any other content makes this a `UserError` with nothing touched."""
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise UserError("--out names a file, not a directory", path=out, hint="give a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        ours = _bundle_files(out)
        foreign = sorted(p.relative_to(out).as_posix() for p in _all_files(out) if p not in ours)
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise UserError(
                f"--out directory holds files tfrepro did not write ({shown}); nothing was deleted",
                path=out,
                hint="give --out a new or empty directory, or an earlier bundle's own",
            )
        for p in ours:
            if p.is_symlink() or p.is_file():
                p.unlink()
        # directories the bundle made, deepest first, once they are empty
        for d in sorted({d for p in ours for d in p.parents if out in d.parents}, key=lambda d: -len(d.parts)):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    out.mkdir(parents=True, exist_ok=True)
    return out


def record(out: Path) -> None:
    """Write the manifest: every file now under `out` (which `prepare` left
    empty, so every one is the bundle's)."""
    files = sorted(p.relative_to(out).as_posix() for p in _all_files(out) if p.name != MANIFEST)
    (out / MANIFEST).write_text(json.dumps({"tool": "tfrepro", "files": files}, indent=1), encoding="utf-8")


def _all_files(out: Path) -> list[Path]:
    """Files and symlinks under `out`: a directory counts through what it
    holds (an empty one holds no data, and is left where it is)."""
    return [p for p in out.rglob("*") if p.is_symlink() or not p.is_dir()]


def _bundle_files(out: Path) -> set[Path]:
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            listed = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return set()
        inside = {(out / rel) for rel in listed if ".." not in Path(rel).parts and not Path(rel).is_absolute()}
        return inside | {manifest}
    if set(out.iterdir()) == {out / "EXPLANATION.md"}:  # a known cost explained (report/bundle.py `write_explanation`)
        return {out / "EXPLANATION.md"}
    if (out / "ISSUE.md").is_file() and (out / "report.json").is_file():
        return {p for p in _all_files(out) if p.relative_to(out).parts[0] in _LEGACY_NAMES}
    return set()
