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
- Both ends are checked before anything else: a good end that is not healthy
  gives `baseline-fails`, a bad end that cannot be tried `error`, a bad end
  without the symptom `none`. Nothing in between is tried then.
- The search is locked onto one symptom (`judge`): a commit that stops on
  something else (a syntax error, a crash while hunting a NaN) is a skip, and
  skips that hide the answer give `ambiguous` with `candidates`, never a guess.
- Timing trials (a slowdown hunt) run one at a time, interleaved with the
  good end's; other trials of a round run `executor.slots` at a time.
- All trials use one set of settings: the user's current `tfrepro.toml` (or
  the defaults) with the command-line overrides; only the code varies.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro.bisect import gitcopy
from tfrepro.bisect.events import BisectEvents, PointTried, TrialRecord
from tfrepro.bisect.rangesearch import STOPPERS, Mark, bisect_range, judge
from tfrepro.errors import TfreproError, UserError
from tfrepro.settings import WARMUP_STEPS, SymptomSettings, TrialSettings
from tfrepro.trials import classify
from tfrepro.trials.executors import Executor, LocalExecutor, Runner, TrialRequest
from tfrepro.trials.state import StateDir, write_trial_record
from tfrepro.trials.values import SYMPTOM_ORDER, RunResult, Status, TrialResult, Verdict

if TYPE_CHECKING:
    from tfrepro.project import Project


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def full_summary(r: TrialResult) -> dict[str, Any]:
    """Every field of a trial plus the numbers a reader looks for first (the
    result's `baseline` and `failing`; the report plots their losses)."""
    return {**r.to_dict(), **trial_summary(r)}


def trial_summary(r: TrialResult) -> dict[str, Any]:
    """The few numbers a reader wants from one trial (one line of the trial log)."""
    return {
        "label": r.label, "mode": r.mode, "steps_run": r.steps_run,
        "first_loss": _finite_or_none(r.first_loss), "last_loss": _finite_or_none(r.last_loss),
        "first_nonfinite_step": r.first_nonfinite_step,
        "median_step_time": r.median_step_time(), "crashed": r.crashed,
        "timed_out": r.timed_out, "error": r.error, "cached": r.cached, "log_dir": r.log_dir,
    }


def as_written(root: Path) -> "Project":
    """The project at `root` with no feature blocks: its variant is the files
    byte for byte, as committed.

    Commit mode toggles nothing, so it does not parse markers: a commit whose
    markers are malformed (or whose blocks of one feature disagree) still
    runs exactly as written, as plain Python ignores the marker comments.
    """
    from tfrepro.project import Manifest, Project, iter_project_files

    return Project(root, Manifest(), {}, [f.as_posix() for f in iter_project_files(root)])


def project_root(path: str | Path) -> tuple[Path, str | None]:
    """PATH as the user gave it -> (project directory, entry file or None):
    like `Project.load`, a .py file stands for its directory with that entry."""
    p = Path(path).resolve()
    if p.is_file() and p.suffix == ".py":
        return p.parent, p.name
    return p, None


def load_settings(project_root: Path) -> tuple[TrialSettings, SymptomSettings]:
    """The user's current `tfrepro.toml` (working tree), or the defaults."""
    from tfrepro.project import MANIFEST, Manifest

    path = project_root / MANIFEST
    if not path.exists():
        m = Manifest()
    else:
        m = Manifest.parse(path.read_text(encoding="utf-8"), str(path))
    return m.trial, m.symptoms


def _shown_path(p: Path) -> str:
    """Relative to the current directory when below it (as the engine shows it)."""
    rel = os.path.relpath(p, Path.cwd())
    return rel if not rel.startswith("..") else str(p)


def _first_symptom(shown: frozenset[Verdict]) -> Verdict | None:
    return next((v for v in SYMPTOM_ORDER if v in shown), None)


def _names(shown: frozenset[Verdict]) -> str:
    return ", ".join(v.value for v in SYMPTOM_ORDER if v in shown) or "nothing"


@dataclass(frozen=True)
class _Ends:
    """What the two ends established: the reference trial, the bad end's
    trial, the symptom hunted."""

    good: TrialResult
    bad: TrialResult
    target: Verdict
    baseline: dict[str, Any]


class _Run:
    """The state of one commit bisection: trials, marks, the run dir."""

    def __init__(self, rng: gitcopy.CommitRange, checkouts: gitcopy.Checkouts, executor: Executor,
                 settings: TrialSettings, symptoms: SymptomSettings, state: StateDir, run_dir: Path,
                 events: BisectEvents, use_cache: bool) -> None:
        self.rng, self.checkouts, self.executor = rng, checkouts, executor
        self.settings, self.symptoms, self.state, self.run_dir = settings, symptoms, state, run_dir
        self.events, self.use_cache = events, use_cache
        self.projects: dict[str, Project | str] = {}  # sha -> project, or why it cannot load
        self.records: list[TrialRecord] = []
        self.noise = 0.0
        self.tried: list[PointTried] = []
        self.first: dict[str, TrialResult] = {}  # sha -> its first trial (repeat 0)
        self.table: list[dict[str, Any]] = []
        self.log = (run_dir / "trials.jsonl").open("a", encoding="utf-8")

    # -- running -----------------------------------------------------------
    def project(self, sha: str) -> "Project | str":
        if sha not in self.projects:
            try:
                root = self.checkouts.checkout(self.rng, sha)
            except TfreproError as e:
                self.projects[sha] = f"the project does not load at this commit: {e}"
                return self.projects[sha]
            entry = self.settings.entry
            if self.settings.command is None and not (root / entry).is_file():
                self.projects[sha] = f"the project does not load at this commit: no {entry}"
            else:
                self.projects[sha] = as_written(root)
        return self.projects[sha]

    def _request(self, commit: gitcopy.CommitInfo, repeat: int, project: "Project") -> TrialRequest:
        return TrialRequest((), replace(self.settings, repeat=repeat), commit.sha, use_cache=self.use_cache,
                            state_dir=self.state.path, project=project)

    def run_many(self, commits: list[gitcopy.CommitInfo], repeat: int = 0) -> list[TrialResult | str]:
        """Trials of several commits (independent: `executor.slots` at a time).
        A commit that cannot be tried gives the reason instead of a trial."""
        out: list[TrialResult | str] = []
        runnable: list[tuple[int, gitcopy.CommitInfo, Project]] = []
        for c in commits:
            p = self.project(c.sha)
            out.append(p if isinstance(p, str) else "")
            if not isinstance(p, str):
                runnable.append((len(out) - 1, c, p))
        for _, c, _p in runnable:
            self.events.trial_started((), f"commit {c.sha[:12]}", repeat)
        results = self.executor.run_batch(runnable[0][2] if runnable else None,
                                          [self._request(c, repeat, p) for _, c, p in runnable])
        for (i, c, _p), r in zip(runnable, results):
            out[i] = self._record(c, repeat, r)
        return out

    def run_timed(self, commit: gitcopy.CommitInfo, repeat: int) -> TrialResult | str:
        p = self.project(commit.sha)
        if isinstance(p, str):
            return p
        self.events.trial_started((), f"commit {commit.sha[:12]}", repeat)
        return self._record(commit, repeat, self.executor.run_timed(p, self._request(commit, repeat, p)))

    def _record(self, commit: gitcopy.CommitInfo, repeat: int, result: TrialResult) -> TrialResult | str:
        if not result.could_not_run:
            self.first.setdefault(commit.sha, result)
        index = len(self.records) + 1
        rel = f"trials/{index:03d}-{commit.sha[:12]}-r{repeat}"
        write_trial_record(self.run_dir / rel, full_summary(result), result.log_dir)
        record = TrialRecord(index, (), f"commit {commit.sha[:12]}", repeat, result, f"{rel}/summary.json")
        self.records.append(record)
        row = {"sha": commit.sha, "subject": commit.subject, "repeat": repeat, **trial_summary(result),
               "key": result.key, "wall_s": result.wall_s, "summary": record.summary}
        self.table.append(row)
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()
        self.events.trial_finished(record)
        if result.could_not_run:  # the executor lost it twice: a skip, never a verdict
            return result.error or "could not run"
        return result

    # -- judging -----------------------------------------------------------
    def shows(self, result: TrialResult, reference: TrialResult | None) -> frozenset[Verdict]:
        return classify.symptoms(result, reference=reference, settings=self.symptoms, noise=self.noise)

    def slower(self, commit: gitcopy.CommitInfo) -> tuple[bool, str | None]:
        """Interleaved timing trials of the good end and `commit` (the
        classifier's sequential test); repeat i of each is cached."""
        good = self.rng.good

        def pair(i: int) -> tuple[float, float] | Verdict:
            a, b = self.run_timed(good, i), self.run_timed(commit, i)
            if isinstance(a, str) or isinstance(b, str):
                return Verdict.UNTESTABLE
            ta, tb = a.median_step_time(), b.median_step_time()
            if ta is None or tb is None or a.crashed or b.crashed or b.nonfinite:
                return Verdict.UNTESTABLE
            return ta, tb

        out = classify.sequential_slowdown(pair, self.symptoms.slowdown, rng=random.Random(self.settings.seed))
        if out.stopped is not None:
            return False, f"could not be timed ({out.stopped.value})"
        return out.verdict is Verdict.SLOWDOWN, None

    def mark(self, commit: gitcopy.CommitInfo, mark: Mark, verdict: Verdict,
             shows: frozenset[Verdict] = frozenset(), reason: str | None = None) -> Mark:
        order = tuple(v for v in (*SYMPTOM_ORDER, Verdict.UNTESTABLE) if v in shows)
        point = PointTried(commit.sha, commit.subject, verdict, order, reason)
        self.tried.append(point)
        self.events.point_tried(point)
        return mark

    def judge_commit(self, commit: gitcopy.CommitInfo, r: TrialResult | str, ends: _Ends) -> Mark:
        """Good, bad or skip for one tried commit, locked onto the target."""
        if isinstance(r, str):
            self.checkouts.release(commit.sha)
            return self.mark(commit, Mark.SKIP, Verdict.UNTESTABLE, reason=r)
        shown = self.shows(r, ends.good)
        if ends.target is Verdict.SLOWDOWN and not shown & STOPPERS:
            slower, why = self.slower(commit)
            if why:
                return self.mark(commit, Mark.SKIP, Verdict.UNTESTABLE, shown, why)
            shown = shown | {Verdict.SLOWDOWN} if slower else shown
        mark, reason = judge(shown, ends.target, error=r.error, bad_error=ends.bad.error)
        self.checkouts.release(commit.sha)
        verdict = {Mark.BAD: ends.target, Mark.GOOD: Verdict.OK, Mark.SKIP: Verdict.UNTESTABLE}[mark]
        return self.mark(commit, mark, verdict, shown, reason)


class _Stop(Exception):
    """The ends do not hold: the run ends with this status and message."""

    def __init__(self, status: Status, message: str, symptom: Verdict | None = None,
                 baseline: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.symptom, self.baseline = status, message, symptom, baseline


def _check_ends(run: _Run, symptom: Verdict | None) -> _Ends:
    """Both ends first (in one round): the good end must be healthy, the bad
    end must show the symptom hunted (or one, to pick the hunt)."""
    good_c, bad_c = run.rng.good, run.rng.bad
    short = lambda c: c.sha[:12]  # noqa: E731
    # Side by side when trials run in parallel; else the good end alone first
    # (a good end that fails ends the run before the bad end costs a trial).
    g, x = run.run_many([good_c, bad_c]) if run.executor.slots > 1 else (run.run_many([good_c])[0], None)
    if isinstance(g, str):
        run.mark(good_c, Mark.SKIP, Verdict.UNTESTABLE, reason=g)
        raise _Stop(Status.ERROR, f"the good end {short(good_c)} cannot be tried: {g}", symptom)
    g_shows = run.shows(g, None)
    baseline = full_summary(g)
    if (symptom is not None and symptom in g_shows) or g_shows & STOPPERS:
        run.mark(good_c, Mark.BAD, symptom if symptom in g_shows else _first_symptom(g_shows), g_shows, g.error)
        raise _Stop(Status.BASELINE_FAILS, f"the good end {short(good_c)} ({good_c.subject}) already shows "
                    f"{_names(g_shows)}" + (f": {g.error}" if g.error else "") + "; give an older --good",
                    symptom, baseline)
    run.mark(good_c, Mark.GOOD, Verdict.OK, g_shows)
    x = x if x is not None else run.run_many([bad_c])[0]
    if isinstance(x, str):
        run.mark(bad_c, Mark.SKIP, Verdict.UNTESTABLE, reason=x)
        raise _Stop(Status.ERROR, f"the bad end {short(bad_c)} cannot be tried: {x}", symptom, baseline)
    x_shows = run.shows(x, g)
    target = symptom or _first_symptom(x_shows)
    if target is Verdict.MISMATCH:
        # The good end run twice says how much loss noise is inherent; a
        # "mismatch" within that noise is no symptom.
        g2 = run.run_many([good_c], repeat=1)[0]
        if not isinstance(g2, str):
            run.noise = classify.measure_noise(g, g2)
        x_shows = run.shows(x, g)
        target = symptom or _first_symptom(x_shows)
    if target in (None, Verdict.SLOWDOWN) and run.symptoms.slowdown and not x_shows & STOPPERS:
        if run.slower(bad_c)[0]:
            target, x_shows = Verdict.SLOWDOWN, x_shows | {Verdict.SLOWDOWN}
    if target is None or target not in x_shows:
        what = target.value if target else "any symptom (nan, crash, timeout, mismatch, slowdown)"
        run.mark(bad_c, Mark.GOOD, _first_symptom(x_shows) or Verdict.OK, x_shows)
        raise _Stop(Status.NONE, f"the bad end {short(bad_c)} ({bad_c.subject}) does not show {what} "
                    f"against the good end {short(good_c)} (it shows {_names(x_shows)})", target, baseline)
    run.mark(bad_c, Mark.BAD, target, x_shows)
    run.events.phase(f"hunting: {target.value}")
    return _Ends(g, x, target, baseline)


def _hunt(run: _Run, ends: _Ends) -> RunResult:
    """The range between the ends (both already judged), then the answer."""
    rng = run.rng
    inner = {c.sha: c for c in rng.commits[1:-1]}

    def test(c: gitcopy.CommitInfo) -> Mark:
        if c.sha == rng.good.sha:
            return Mark.GOOD
        if c.sha == rng.bad.sha:
            return Mark.BAD
        r = run.run_timed(c, 0) if ends.target is Verdict.SLOWDOWN else run.run_many([c])[0]
        return run.judge_commit(c, r, ends)

    def test_many(cs: list[gitcopy.CommitInfo]) -> list[Mark]:
        todo = [c for c in cs if c.sha in inner]
        got = dict(zip([c.sha for c in todo], run.run_many(todo)))
        return [test(c) if c.sha not in got else run.judge_commit(c, got[c.sha], ends) for c in cs]

    width = run.executor.slots if ends.target is not Verdict.SLOWDOWN else 1
    found = bisect_range(rng.commits, test, width=width, test_many=test_many if width > 1 else None)
    if found.status == "found":
        return RunResult(Status.FOUND, ends.target, baseline=ends.baseline, first_bad_commit=found.first_bad.sha,
                         details={"commit": found.first_bad.to_dict()})
    return RunResult(Status.AMBIGUOUS, ends.target, baseline=ends.baseline,
                     candidates=tuple(c.to_dict() for c in found.candidates),
                     error=f"{len(found.candidates)} candidate commits: the untestable ones among them hide "
                     "which one is the first bad one")


def bisect_commits(
    path: str | Path,
    good: str,
    bad: str,
    *,
    symptom: Verdict | None = None,
    settings: TrialSettings | None = None,
    symptoms: SymptomSettings | None = None,
    use_cache: bool = True,
    trial: Runner | None = None,
    events: BisectEvents | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Find the first commit in good..bad whose trial shows the symptom.

    Returns the RunResult (its JSON also in `<run_dir>/result.json`, every
    trial in `<run_dir>/trials.jsonl`). Bad input raises UserError (exit 2).
    `settings`/`symptoms` default to the user's current `tfrepro.toml`;
    `symptom` None hunts what the bad end shows (nan, crash, timeout,
    mismatch, slowdown in that order). Trials run on `executor` (default:
    local, one at a time; `trial` stands in for the trial runner in tests).
    """
    started = time.monotonic()
    root, entry = project_root(path)
    rng = gitcopy.open_range(root, good, bad)
    if settings is None or symptoms is None:
        t, s = load_settings(root)
        settings, symptoms = settings or t, symptoms or s
    if entry and settings.command is None:
        settings = replace(settings, entry=entry)
    if symptom is Verdict.SLOWDOWN and settings.steps < WARMUP_STEPS + 2:
        raise UserError(f"a slowdown needs steps past the {WARMUP_STEPS} warm-up steps",
                        hint=f"use --steps {WARMUP_STEPS + 10} or more")
    state = StateDir.of(root)
    run_dir = state.new_run_dir()
    events = events or BisectEvents()
    events.phase(f"bisecting {len(rng.commits)} commits: good {rng.good.sha[:12]} ({rng.good.subject}) .. "
                 f"bad {rng.bad.sha[:12]} ({rng.bad.subject})")
    executor = executor or LocalExecutor(1, runner=trial)
    with gitcopy.Checkouts(state) as checkouts:
        run = _Run(rng, checkouts, executor, settings, symptoms, state, run_dir, events, use_cache)
        try:
            try:
                answer = _hunt(run, _check_ends(run, symptom))
            except _Stop as stop:
                answer = RunResult(stop.status, stop.symptom, baseline=stop.baseline, error=stop.message)
        finally:
            run.log.close()
    return _finish(run, answer, root, started)


def _finish(run: _Run, answer: RunResult, root: Path, started: float) -> RunResult:
    """The answer with the run's evidence; the two commits' projects kept for
    the bug report; written to `<run_dir>/result.json`."""
    rng, failing = run.rng, answer.first_bad_commit or run.rng.bad.sha
    verdicts = {t.label: t.verdict.value for t in run.tried}
    details: dict[str, Any] = {
        **answer.details,
        "failing": full_summary(run.first[failing]) if failing in run.first else None,
        "cached_trials": sum(1 for r in run.records if r.result.cached),
        "good": rng.good.to_dict(), "bad": rng.bad.to_dict(), "range_size": len(rng.commits),
        "tried": [{"sha": t.label, **t.to_dict()} for t in run.tried],
        "project": str(root), "settings": run.settings.to_dict(), "noise": run.noise,
        "trials_table": [{**row, "enabled": [], "role": f"commit {row['sha'][:12]}",
                          "verdict": verdicts.get(row["sha"])} for row in run.table],
    }
    if answer.error:
        details["message"] = answer.error
    if answer.first_bad_commit:
        for key, sha in (("good_project", rng.good.sha), ("first_bad_project", answer.first_bad_commit)):
            dest = run.run_dir / "commits" / sha[:12]
            gitcopy.materialize(rng.repo_root, sha, rng.relpath, dest)
            details[key] = str(dest)
    result = replace(answer, trials=len(run.records), wall_s=round(time.monotonic() - started, 3),
                     run_dir=_shown_path(run.run_dir), details=details)
    (run.run_dir / "result.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return result
