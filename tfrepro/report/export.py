"""The report's export step: the run's two variants as standalone scripts.

The culprit configuration becomes `repro.py` (and the project modules it
imports), exported (Contract 1: markers and inactive parts gone); its
reference (the same without the culprits; for a mismatch, the reference
configuration) goes next to it as `reference.py` (or `reference/...` when it
takes more than one file). A commit bisection exports both ends' projects
as written: the first bad commit, and the good commit as the reference.
Every text is scrubbed before it is kept.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tfrepro.errors import TfreproError, UserError
from tfrepro.features import decode_source
from tfrepro.project import Project
from tfrepro.projectfiles import imported_files
from tfrepro.report.records import ResultJson
from tfrepro.settings import TrialSettings

ENTRY = "repro.py"
REFERENCE = "reference.py"
DATA = "data.npz"


@dataclass(frozen=True)
class Export:
    """The two exported variants, scrubbed: the culprit one and its reference;
    `data`, the records both read when the data was reduced (reduce.py):
    data.npz beside each entry."""

    cand_cfg: list[str] | None
    ref_cfg: list[str] | None
    cand_files: dict[str, str]
    ref_files: dict[str, str]
    data: bytes | None = None

    def ref_path(self, rel: str) -> str:
        """Where the reference's file `rel` lies in the bundle: one script is
        reference.py beside repro.py (what it reads, data.npz, lies beside
        both); several keep their layout under reference/."""
        if set(self.ref_files) == {ENTRY}:
            return REFERENCE if rel == ENTRY else rel
        return f"reference/{rel}"

    @property
    def ref_name(self) -> str:
        return self.ref_path(ENTRY)

    @property
    def diff(self) -> str:
        """The reference's files -> the culprit variant's, as one unified diff."""
        chunks = []
        for rel in sorted(set(self.ref_files) | set(self.cand_files)):  # a file alike in both gives no chunk
            a, b = (files.get(rel, "").splitlines(keepends=True) for files in (self.ref_files, self.cand_files))
            chunks.extend(difflib.unified_diff(a, b, fromfile=self.ref_path(rel), tofile=rel))
        return "".join(chunks)

    def with_entry(self, change: Callable[[str], str], *, ref: bool = True) -> Export:
        """The export with its entry script changed by `change` (and the reference's, when `ref` and it has one)."""
        cand = {**self.cand_files, ENTRY: change(self.cand_files[ENTRY])}
        if not (ref and ENTRY in self.ref_files):
            return replace(self, cand_files=cand)
        return replace(self, cand_files=cand, ref_files={**self.ref_files, ENTRY: change(self.ref_files[ENTRY])})


def entry_of(settings: TrialSettings) -> str:
    """The script a trial runs: `[trial] entry`, or the first .py of `command`."""
    if settings.command is None:
        return settings.entry
    return next((a for a in settings.command if a.endswith(".py")), settings.entry)


def load_at(root: str | Path, entry: str | None, *, detect: bool = True) -> Any:
    """The project at `root`, never one found above or below it (a run's own
    project, a commit's checkout), with the entry the run recorded when it
    is a file there (a `train.py` with no tfrepro.toml, not the default
    repro.py); `detect=False`: as written."""
    script = Path(root) / entry if entry else None
    return Project.load(script if script and script.is_file() else root, detect=detect, root=root)


def bundle_files(project: Any, enabled: Iterable[str] | None, entry: str, *, markers: bool = False) -> dict[str, str]:
    """The variant as standalone files: the entry and the project modules it
    imports (transitively; never the project's other .py files), the entry
    renamed to repro.py (`carried_rel`). Marked ones exported (markers and
    inactive parts gone), or with `markers` rendered (the blocks kept, for
    `new --from`). Data files are not carried: a repro uses synthetic data."""
    marked = project.render(enabled, export=not markers)
    files: dict[str, str] = {}
    for rel in imported_files(project.root, [entry], project.files):
        if not rel.endswith(".py"):
            continue
        text = marked.get(rel)
        if text is None:
            text = decode_source((project.root / rel).read_bytes(), rel)[0]  # as Python reads it
        files[carried_rel(rel, entry)] = text
    if ENTRY not in files:
        raise UserError("the entry is not a Python file of the project", path=project.root / entry)
    return files


def carried_rel(rel: str, entry: str) -> str:
    """Where a carried file goes: the entry becomes repro.py at the top, and
    the modules keep their place relative to it (a script in `src/` imports
    its neighbours from its own directory)."""
    if rel == entry:
        return ENTRY
    here = posixpath.dirname(entry)
    return rel[len(here) + 1 :] if here and rel.startswith(here + "/") else rel


def export_variants(
    result: ResultJson, project: Any, run_dir: Path, symptom: str, entry: str, scrub: Callable[[str], str]
) -> Export:
    """The run's culprit variant and its reference, exported and scrubbed. A
    config of None means "as written": commit bisection keeps both ends'
    projects in the run directory, and the good end is the reference."""
    if result.get("first_bad_commit"):
        bad_dir, good_dir = result.get("first_bad_project"), result.get("good_project")
        if not (bad_dir and good_dir and Path(bad_dir).is_dir() and Path(good_dir).is_dir()):
            raise TfreproError(f"the run {run_dir} lacks the first bad commit's project; bisect again")
        # the checkouts are the projects: never the one found above them (.tfrepro/ sits in the user's)
        cand_cfg, ref_cfg = None, None
        cand_at, ref_at = load_at(bad_dir, entry, detect=False), load_at(good_dir, entry, detect=False)
    else:
        failed = result.get("status") == "baseline-fails"  # the baseline itself fails: every feature off
        cand_cfg = [] if failed else sorted(result.get("culprit_config") or result.get("culprits") or [])
        # the reference: without the culprits; of a mismatch, only the affects_loss features on (Contract 3)
        culprits = set(result.get("culprits") or [])
        keep = set(result.get("affects_loss") or []) if symptom == "mismatch" else set(cand_cfg) - culprits
        ref_cfg, cand_at, ref_at = sorted(set(cand_cfg) & keep), project, project
    cand, ref = bundle_files(cand_at, cand_cfg, entry), bundle_files(ref_at, ref_cfg, entry)
    return Export(cand_cfg, ref_cfg, {k: scrub(v) for k, v in cand.items()}, {k: scrub(v) for k, v in ref.items()})


def write_files(dest: Path, files: Mapping[str, str], data: bytes | None = None, *, data_at: str = DATA) -> Path:
    """`files` (relpath -> text, as it is: no newline translation) under `dest`,
    and `data` (the records a reduced export reads) at `data_at`, beside the entry."""
    for rel, text in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text, encoding="utf-8", newline="")
    if data is not None:
        (dest / data_at).parent.mkdir(parents=True, exist_ok=True)
        (dest / data_at).write_bytes(data)
    return dest


def write_scripts(out: Path, result: ResultJson, export: Export, scrub: Callable[[str], str]) -> dict[str, str]:
    """repro.py (and the files it imports), the reference next to it, each
    text scrubbed, data.npz beside each entry; returns what each script is,
    for the bundle's artifacts list."""
    write_files(out, {rel: scrub(text) for rel, text in export.cand_files.items()}, export.data)
    ref = {export.ref_path(rel): scrub(text) for rel, text in export.ref_files.items()}
    write_files(out, ref, export.data, data_at=export.ref_path(DATA))
    if result.get("first_bad_commit"):
        bad = str(result.get("first_bad_commit"))[:12]
        good = str((result.get("good") or {}).get("sha", ""))[:12]
        return {
            ENTRY: f"the script at the first bad commit {bad}; run `python {ENTRY}`",
            export.ref_name: f"the script at the good commit {good}, for comparison",
        }
    return {
        ENTRY: f"the minimal failing script ({_cfg_words(export.cand_cfg)}); run `python {ENTRY}`",
        export.ref_name: f"the same script without the culprits ({_cfg_words(export.ref_cfg)}), for comparison",
    }


def _cfg_words(cfg: list[str] | None) -> str:  # None (as written) only in a commit run, worded above
    return "features on: " + ", ".join(cfg) if cfg else "every feature off"
