"""Commit bisection: the first commit whose trial shows the symptom (EDGE).

`tfrepro bisect --good REV --bad REV [PATH]` runs the project *as written* at
each tried commit (Contract 4) on the same executor, events, trial cache and
classifier as feature mode; the good commit's trial is the reference for
mismatch and slowdown. The search is `rangesearch.bisect_range` (pure; k-ary
when the executor runs several trials at once), the checkouts are `gitcopy`
(read-only on the repository); this module ties them together.

Invariants:

- The user's working tree, index, branch, HEAD and stash are never written
  (see `gitcopy`); everything this module writes is under the project's
  `.tfrepro/` (`StateDir`): checkouts, the run directory, the trial cache.
- Both ends first, the hunt locked onto one symptom (a commit that stops on
  something else, a syntax error say, is a skip), skips and timing trials:
  as in every range mode (`ranges.py`).
- All trials use one set of settings: the user's current `tfrepro.toml` (or
  the defaults) with the command-line overrides; only the code varies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tfrepro.bisect import gitcopy
from tfrepro.bisect.events import BisectEvents, BisectOptions, TrialLog
from tfrepro.bisect.ranges import Point, RangeRun, Source, with_evidence
from tfrepro.errors import TfreproError
from tfrepro.project import locate
from tfrepro.settings import SymptomSettings, TrialSettings
from tfrepro.trials.executors import Executor, LocalExecutor, Runner
from tfrepro.trials.state import StateDir
from tfrepro.trials.trial import Trial, TrialOptions
from tfrepro.trials.values import RunResult, evidence_doc

if TYPE_CHECKING:
    from tfrepro.project import Project


def as_written(root: Path) -> "Project":
    """The project at `root` with no feature blocks: its variant is the files
    byte for byte, as committed.

    Commit mode toggles nothing, so it does not parse markers: a commit whose
    markers are malformed (or whose blocks of one feature disagree) still
    runs exactly as written, as plain Python ignores the marker comments.
    """
    from tfrepro.project import Manifest, Project, iter_project_files

    return Project(root, Manifest(), {}, [f.as_posix() for f in iter_project_files(root)])


def range_settings(root: Path, entry: str | None, options: BisectOptions) -> tuple[TrialSettings, SymptomSettings]:
    """The settings of every trial of a range bisection: feature mode's (the
    working tree's `tfrepro.toml`, or the defaults; the command-line
    overrides through `BisectOptions.trial_settings`: --steps, --budget-s)
    with the entry PATH named. Bad input raises UserError."""
    from tfrepro.project import read_manifest

    manifest = read_manifest(root)[1]
    settings, symptoms = options.trial_settings(manifest.trial), manifest.symptoms
    if entry and settings.command is None:
        settings = replace(settings, entry=entry)
    options.refuse_short_slowdown(settings)
    return settings, symptoms


class CommitSource(Source):
    """A commit is tried as written, from a read-only checkout."""

    noun = "commit"
    key = "sha"
    older = "give an older --good"

    def __init__(
        self, rng: gitcopy.CommitRange, checkouts: gitcopy.Checkouts, state: StateDir, use_cache: bool
    ) -> None:
        self.rng, self.checkouts, self.state, self.use_cache = rng, checkouts, state, use_cache
        self.projects: dict[str, Project | str] = {}  # sha -> project, or why it cannot load

    def request(self, point: Point, settings: TrialSettings) -> Trial | str:
        sha = point.label
        if sha not in self.projects:  # checked out on first use
            try:
                root = self.checkouts.checkout(self.rng, sha)
                if settings.command is None and not (root / settings.entry).is_file():
                    raise TfreproError(f"no {settings.entry}")
            except TfreproError as e:
                self.projects[sha] = f"the project does not load at this commit: {e}"
            else:
                self.projects[sha] = as_written(root)
        project = self.projects[sha]
        if isinstance(project, str):
            return project
        how = TrialOptions(label=point.label, use_cache=self.use_cache, state_dir=self.state.path)
        return Trial((), settings, how, project=project)

    def release(self, point: Point) -> None:
        self.checkouts.release(point.label)
        self.projects.pop(point.label, None)


@dataclass(frozen=True)
class CommitFields:
    """Commit mode's keys of the result document: the ends, the range, the
    first bad commit and the two commits' projects kept for the bug report."""

    good: gitcopy.CommitInfo
    bad: gitcopy.CommitInfo
    range_size: int
    project: str
    settings: TrialSettings
    commit: gitcopy.CommitInfo | None = None
    good_project: str | None = None
    first_bad_project: str | None = None

    def to_dict(self) -> dict[str, object]:
        return evidence_doc(self, frozenset({"commit", "good_project", "first_bad_project"}))


def bisect_commits(
    path: str | Path,
    good: str,
    bad: str,
    options: BisectOptions = BisectOptions(),
    *,
    trial: Runner | None = None,
    events: BisectEvents | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Find the first commit in good..bad whose trial shows the symptom.

    Returns the RunResult (its JSON also in `<run_dir>/result.json`, every
    trial in `<run_dir>/trials.jsonl`). Bad input raises UserError (exit 2).
    Trials run on `executor` (default: local, one at a time; `trial` stands
    in for the trial runner in tests).
    """
    started = time.monotonic()
    # PATH as feature mode finds it: a script stands for the project it belongs
    # to, so `bisect sub/train.py` in every mode reads one tfrepro.toml, writes one .tfrepro/
    root, entry = locate(path)
    rng = gitcopy.open_range(root, good, bad)
    settings, symptoms = range_settings(root, entry, options)
    state = StateDir.of(root)
    events = events or BisectEvents()  # the first line before the checkouts' sweep and the run dir
    events.phase(
        f"bisecting {len(rng.commits)} commits: good {rng.good.sha[:12]} ({rng.good.subject}) .. "
        f"bad {rng.bad.sha[:12]} ({rng.bad.subject})"
    )
    executor = executor or LocalExecutor(1, runner=trial)
    points = [Point(c.sha, c.subject, c) for c in rng.commits]
    with gitcopy.Checkouts(state) as checkouts:
        source = CommitSource(rng, checkouts, state, options.use_cache)
        run = RangeRun(points, source, executor, settings, symptoms, TrialLog(state, started=started), events, options)
        answer, first_bad = run.answer(options.symptom)
    fields = CommitFields(rng.good, rng.bad, len(rng.commits), str(root), run.settings)
    if first_bad is not None:  # the two commits' projects, kept for the bug report
        answer = replace(answer, first_bad_commit=first_bad.label)
        good_dir, bad_dir = (
            gitcopy.materialize(rng.repo_root, sha, rng.relpath, run.run_dir / "commits" / sha[:12])
            for sha in (rng.good.sha, first_bad.label)
        )
        fields = replace(fields, commit=first_bad.commit, good_project=str(good_dir), first_bad_project=str(bad_dir))
    answer = replace(answer, candidates=tuple(p.commit.to_dict() for p in answer.candidates))
    return with_evidence(answer, run, first_bad, fields)
