"""Bisection over an ordered range of *points*: commits or TensorFlow releases (EDGE).

Commit mode (`commits.py`) and version mode (`versions.py`) differ only in
what a point is and how it is tried; everything else lives here, once: both
ends first (by feature mode's rules, `bisect/ends.py`), the symptom the bad
end decides, the good end as everybody's reference, the hunt with
`rangesearch.bisect_range` (k-ary when the executor runs several trials at
once), skips for points that cannot be tried or that stop on another
symptom, the trials table.

A mode supplies a `Source`: `request(point, settings)` gives the trial to run
(or the reason the point cannot be tried), `release(point)` frees what it
held. Trials run on the same `Executor` as feature mode; progress goes to
the same typed `BisectEvents`.

Invariants:
- Both ends are judged before anything in between is tried: a good end that
  fails gives `baseline-fails`, an end that cannot be tried `error`, an end
  that cannot be measured `untestable`, a bad end without the symptom `none`.
- The hunt is locked onto one symptom (`rangesearch.judge`); skips that hide
  the answer give `ambiguous` with the candidates, never a guess.
- Timing trials (slowdown) run one at a time with a time budget, each
  point's between two of the good end's (B C B C B: one pool of good-end
  timing trials shared by every point, `timing.TimingPool`); other trials of
  a round run `executor.slots` at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tfrepro.bisect.ends import BASELINE_FAILURES, early_exit, lost, pick_symptom, timing_stop, untimed
from tfrepro.bisect.events import BisectEvents, BisectOptions, PointTried, TrialLog, trial_row
from tfrepro.bisect.rangesearch import Mark, bisect_range, judge
from tfrepro.settings import SymptomSettings, TrialSettings
from tfrepro.trials import classify
from tfrepro.trials.executors import Executor
from tfrepro.trials.sigterm import sigterm_interrupts
from tfrepro.trials.slowdown import SequentialPolicy, TimingOutcome
from tfrepro.trials.timing import TimingPool
from tfrepro.trials.trial import Trial
from tfrepro.trials.values import Evidence, RunResult, Status, TrialResult, TrialRow, evidence_doc, summary
from tfrepro.verdicts import STOPPERS, SYMPTOM_ORDER, Verdict

if TYPE_CHECKING:
    from tfrepro.bisect.gitcopy import CommitInfo


@dataclass(frozen=True)
class Point:
    """One point of the range: a commit (label = sha) or a release (label = version)."""

    label: str
    subject: str
    commit: CommitInfo | None = field(default=None, compare=False, hash=False)  # commit mode's

    @property
    def short(self) -> str:
        return self.label[:12]

    @property
    def named(self) -> str:
        """`abc123def456 (subject)`, or the label alone when there is no subject."""
        return f"{self.short} ({self.subject})" if self.subject else self.short


class Source:
    """How a mode tries its points (subclassed by commit and version mode)."""

    noun = "point"
    key = "point"  # what the trial log and the tables call a point's label ("sha", "version")
    older = "give an older good end"  # what to do when the good end already fails

    def request(self, point: Point, settings: TrialSettings) -> Trial | str:
        raise NotImplementedError

    def release(self, point: Point) -> None:
        """The point's trials are done (e.g. remove its checkout)."""

    def role(self, point: Point) -> str:
        return f"{self.noun} {point.short}"


# The few numbers of a trial a reader wants first: one line of the trial log.
ROW_KEYS = (
    "label",
    "mode",
    "steps_run",
    "first_loss",
    "last_loss",
    "first_nonfinite_step",
    "median_step_time",
    "crashed",
    "timed_out",
    "error",
    "cached",
    "log_dir",
)


def names(shown: frozenset[Verdict]) -> str:
    return ", ".join(v.value for v in SYMPTOM_ORDER if v in shown) or "nothing"


class RangeRun:
    """The state of one range bisection: trials, judged points, the run dir."""

    def __init__(
        self,
        points: list[Point],
        source: Source,
        executor: Executor,
        settings: TrialSettings,
        symptoms: SymptomSettings,
        log: TrialLog,
        events: BisectEvents | None,
        options: BisectOptions = BisectOptions(),
    ) -> None:
        self.points, self.source, self.executor = points, source, executor
        self.good, self.bad = points[0], points[-1]  # the ends
        self.settings, self.symptoms, self.events = settings, symptoms, events or BisectEvents()
        self.options = options  # the timing ones: budget, pairs per comparison
        # The good end is every point's timing baseline: one pool of its
        # timing trials, each serving the points on both sides of it; a
        # timing trial is judged alone, a NaN only within `steps`.
        self.timing: TimingPool[Point] = TimingPool(
            self._timing_trial,
            lambda p, t: timing_stop(t, self.shows(classify.first_steps(t, self.settings.steps), None)),
            symptoms.slowdown,
            baseline=self.good,
            steps=settings.steps,
        )
        self.log, self.run_dir, self.records = log, log.run_dir, log.records
        self.tried: list[PointTried] = []
        self.first: dict[str, TrialResult] = {}  # label -> its first trial that ran
        self.labels: list[str] = []  # each record's point label, in the log's order
        self.noise = 0.0
        self.jsonl = log.run_dir / "trials.jsonl"  # one line per trial, as it lands (there even when none ran)
        self.jsonl.touch()

    def answer(self, symptom: Verdict | None) -> tuple[RunResult, Point | None]:
        """Both ends, then the hunt -> (the mode's RunResult without its own
        fields, the first bad point when found: the caller fills
        first_bad_commit / first_bad_version from it and from `candidates`)."""
        with sigterm_interrupts():
            target = check_ends(self, symptom)
            if isinstance(target, RunResult):  # the ends do not hold: the run's answer
                return target, None
            # the range between the ends (both already judged)
            known = {self.good.label: Mark.GOOD, self.bad.label: Mark.BAD}
            timed = target is Verdict.SLOWDOWN  # timing trials run one at a time

            def test(ps: list[Point]) -> list[Mark]:
                todo = [p for p in ps if p.label not in known]
                got = dict(zip([p.label for p in todo], self.run_many(todo, alone=timed)))
                return [known.get(p.label) or self.judge_point(p, got[p.label], target) for p in ps]

            found = bisect_range(self.points, test, width=1 if timed else self.executor.slots)
        good = self.first[self.good.label]  # the good end's trial: the result's baseline
        if found.status == "found":
            return RunResult(Status.FOUND, target, baseline=good), found.first_bad
        return RunResult(
            Status.AMBIGUOUS,
            target,
            baseline=good,
            candidates=tuple(found.candidates),
            error=f"{len(found.candidates)} candidate {self.source.noun}s: the untestable ones among them hide "
            f"which one is the first bad one",
        ), None

    # -- running -----------------------------------------------------------
    def run_many(
        self, points: list[Point], repeat: int = 0, settings: TrialSettings | None = None, *, alone: bool = False
    ) -> list[TrialResult | str]:
        """Trials of `points` (`settings`: the run's unless given): side by
        side, `executor.slots` at a time, or one at a time with nothing beside
        them (`alone`: a slowdown hunt's, `executor.run_timed`). A point that
        cannot be tried gives the reason instead of a trial."""
        out: list = [self.source.request(p, replace(settings or self.settings, repeat=repeat)) for p in points]
        todo = [i for i, w in enumerate(out) if not isinstance(w, str)]
        for i in todo:  # alone: each one started, run and recorded before the next
            self.events.trial_started((), self.source.role(points[i]), repeat)
            if alone:
                out[i] = self._record(points[i], repeat, self.executor.run_timed(out[i].project, out[i]))
        if not alone and todo:
            for i, r in zip(todo, self.executor.run_batch(None, [out[i] for i in todo])):
                out[i] = self._record(points[i], repeat, r)
        return out

    def _record(self, point: Point, repeat: int, result: TrialResult) -> TrialResult | str:
        if not result.could_not_run:
            self.first.setdefault(point.label, result)
        record = self.log.add((), self.source.role(point), repeat, result, point.short.replace(" ", "_"))
        full = summary(result)
        row = {
            self.source.key: point.label,
            "subject": point.subject,
            "repeat": repeat,
            **{k: full[k] for k in ROW_KEYS},
            "key": result.key,
            "wall_s": result.wall_s,
            "summary": record.summary,
        }
        self.labels.append(point.label)
        with self.jsonl.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        self.events.trial_finished(record)
        if result.could_not_run:  # the executor lost it twice: a skip, never a verdict
            return result.error or "could not run"
        return result

    # -- judging -----------------------------------------------------------
    def shows(self, result: TrialResult, reference: TrialResult | None, *, early: bool = True) -> frozenset[Verdict]:
        """What `result` shows against `reference` (`early`: with a clean exit
        before the good end's last step as a crash, `ends.early_exit`)."""
        shown = classify.symptoms(result, reference=reference, settings=self.symptoms, noise=self.noise)
        good = self.first.get(self.good.label) if early else None
        return early_exit(shown, result, good, self.settings.steps)

    def _timing_trial(self, point: Point, repeat: int, role: str) -> TrialResult:
        """One timing trial of `point`: a time budget of steady steps, not
        `steps`; one that cannot be tried comes back as could-not-run."""
        got = self.run_many([point], repeat, self.options.timing_settings(self.settings), alone=True)[0]
        return TrialResult(label=point.label, could_not_run=True, error=got) if isinstance(got, str) else got

    def slower(self, point: Point) -> tuple[bool, str | None]:
        """Timing pairs of `point` between the good end's timing trials (B C B,
        `timing.TimingPool`), added to the point's evidence until the
        sequential decision is conclusive; -> (slower, why it could not be
        timed or None). Repeat indices are deterministic: a re-run gets the
        finished trials from the cache."""
        o = self.options
        out = self.timing.timed(point, SequentialPolicy(min_samples=o.timing_min, max_samples=o.timing_max))
        why = untimed([out])
        return (False, why) if why else (out.verdict is Verdict.SLOWDOWN, None)

    def mark(
        self,
        point: Point,
        mark: Mark,
        verdict: Verdict,
        shows: frozenset[Verdict] = frozenset(),
        reason: str | None = None,
    ) -> Mark:
        order = tuple(v for v in (*SYMPTOM_ORDER, Verdict.UNTESTABLE) if v in shows)
        tried = PointTried(point.label, point.subject, verdict, order, reason)
        self.tried.append(tried)
        self.events.point_tried(tried)
        return mark

    def judge_point(self, point: Point, r: TrialResult | str, target: Verdict) -> Mark:
        """Good, bad or skip for one tried point, locked onto the target."""
        if isinstance(r, str):
            self.source.release(point)
            return self.mark(point, Mark.SKIP, Verdict.UNTESTABLE, reason=r)
        shown = self.shows(r, self.first[self.good.label])  # against the good end's trial
        if target is Verdict.SLOWDOWN and not shown & STOPPERS:
            slower, why = self.slower(point)
            if why:
                return self.mark(point, Mark.SKIP, Verdict.UNTESTABLE, shown, why)
            shown = shown | {Verdict.SLOWDOWN} if slower else shown
        mark, reason = judge(shown, target, error=r.error, bad_error=self.first[self.bad.label].error)
        self.source.release(point)
        verdict = {Mark.BAD: target, Mark.GOOD: Verdict.OK, Mark.SKIP: Verdict.UNTESTABLE}[mark]
        if reason is None and mark is Mark.BAD and target is Verdict.CRASH:
            reason = r.error
        return self.mark(point, mark, verdict, shown, reason)


def check_ends(run: RangeRun, symptom: Verdict | None) -> Verdict | RunResult:
    """Both ends first, by feature mode's rules (`bisect/ends.py`): the good
    end must not fail, the ends must be measured (`ends_reason`), the bad
    end must show the symptom hunted (`pick_symptom`): -> that symptom; else
    the run's answer (with the good end's trial as its baseline once it ran)."""
    good, bad, noun = run.good, run.bad, run.source.noun
    # side by side on parallel slots; else the good end first (one that fails spares the bad end's trial)
    g, x = run.run_many([good, bad]) if run.executor.slots > 1 else (run.run_many([good])[0], None)
    if why := lost(f"the good end {good.short}", [g]):
        run.mark(good, Mark.SKIP, Verdict.UNTESTABLE, reason=g)
        return RunResult(Status.ERROR, symptom, error=why)
    g_shows = run.shows(g, None)
    if g_shows & BASELINE_FAILURES:
        run.mark(good, Mark.BAD, classify.primary(g_shows, symptom), g_shows, g.error)
        return RunResult(
            Status.BASELINE_FAILS,
            symptom,
            baseline=g,
            error=f"the good end {good.named} already shows "
            f"{names(g_shows)}" + (f": {g.error}" if g.error else "") + f"; {run.source.older}",
        )
    run.mark(good, Mark.GOOD, Verdict.OK, g_shows)
    x = x if x is not None else run.run_many([bad])[0]
    if why := lost(f"the bad end {bad.short}", [x]):
        run.mark(bad, Mark.SKIP, Verdict.UNTESTABLE, reason=x)
        return RunResult(Status.ERROR, symptom, baseline=g, error=why)
    x_shows = run.shows(x, g, early=False)  # the ends rule first: an end that trains nothing is untestable
    ends = (f"the good end {good.named}", f"the bad end {bad.named}")
    reason = classify.ends_reason([g], [x], symptom, failed=bool(x_shows & STOPPERS), names=ends)
    if reason is not None:
        run.mark(bad, Mark.SKIP, Verdict.UNTESTABLE, run.shows(x, g), reason)
        return RunResult(Status.UNTESTABLE, symptom, baseline=g, error=reason, reason=reason)
    if (symptom or pick_symptom(run.shows(x, g), None)) is Verdict.MISMATCH:
        # the good end run twice: its loss noise (a "mismatch" within it is no symptom)
        g2 = run.run_many([good], repeat=1)[0]
        if not isinstance(g2, str):
            run.noise = classify.measure_noise(g, g2)
    x_shows = run.shows(x, g)
    target = pick_symptom(  # the bad end timed against the good end, unless slowdowns are off or it stopped early
        x_shows, symptom, slower=lambda: bool(run.symptoms.slowdown) and not x_shows & STOPPERS and run.slower(bad)[0]
    )
    if target is None:
        why = untimed(run.timing.outcomes.get(bad))
        if why and symptom is Verdict.SLOWDOWN:  # as feature mode's `_Bisection._run`
            run.mark(bad, Mark.SKIP, Verdict.UNTESTABLE, x_shows, why)
            why = f"the bad end {bad.named} {why}"
            return RunResult(Status.UNTESTABLE, symptom, baseline=g, error=why, reason=why)
        what = symptom.value if symptom else "any symptom (nan, crash, timeout, mismatch, slowdown)"
        run.mark(bad, Mark.GOOD, classify.primary(x_shows), x_shows)
        return RunResult(
            Status.NONE,
            symptom,
            baseline=g,
            error=f"the bad end {bad.named} does not show {what} against the "
            f"good end {good.short} (it shows {names(x_shows)}{f'; it {why}' if why else ''})",
        )
    x_shows |= {target}  # a slowdown shows only in the timing
    run.mark(bad, Mark.BAD, target, x_shows, x.error if target is Verdict.CRASH else None)
    run.events.phase(f"hunting: {target.value} ({len(run.points)} {noun}s)")
    return target


@dataclass(frozen=True)
class RangeEvidence:
    """What a range bisection's trials showed beyond the typed answer: the
    failing point's trial and timing, what was tried, every trial, the
    mode's own fields; the result document's other keys, by `to_dict` only."""

    key: str  # what the tried rows call a point's label ("sha", "version")
    mode: Evidence  # the mode's own keys (commits.CommitFields, versions.VersionFields)
    failing: TrialResult | None = None
    timing: TimingOutcome | None = None
    cached_trials: int = 0
    noise: float = 0.0
    tried: tuple[PointTried, ...] = ()
    trials_table: tuple[TrialRow, ...] = ()
    message: str | None = None

    def to_dict(self) -> dict[str, object]:
        doc = evidence_doc(self, frozenset({"message"}), skip=frozenset({"key", "mode", "tried"}))
        return {**doc, "tried": [{self.key: t.label, **t.to_dict()} for t in self.tried], **self.mode.to_dict()}


def with_evidence(answer: RunResult, run: RangeRun, first_bad: Point | None, mode: Evidence) -> RunResult:
    """The final result (its evidence: what was tried, every trial, the
    mode's fields), written to `<run_dir>/result.json`."""
    verdicts = {t.label: t.verdict.value for t in run.tried}
    key, failing = run.source.key, first_bad or run.bad
    timed = run.timing.outcomes.get(failing)
    evidence = RangeEvidence(
        key,
        mode,
        failing=run.first.get(failing.label),
        timing=timed[-1] if timed else None,  # the failing point's timing evidence
        cached_trials=sum(r.result.cached for r in run.records),
        noise=run.noise,
        tried=tuple(run.tried),
        trials_table=tuple(
            trial_row(rec, verdicts.get(label), **{key: label})
            for rec, label in zip(run.records, run.labels, strict=True)
        ),
        message=answer.error,
    )
    return run.log.answer(answer, evidence)
