"""Commit bisection: the first commit whose trial shows the symptom (EDGE).

`tfrepro bisect --good REV --bad REV [PATH]` runs the project *as written* at
each tried commit (Contract 4) with the feature trials' runner, cache and
classifier; the good commit's trial is the reference for mismatch and
slowdown. The search is `rangesearch.bisect_range` (pure), the checkouts are
`gitcopy` (read-only on the repository); this module ties them together.

Invariants:

- The user's working tree, index, branch, HEAD and stash are never written
  (see `gitcopy`); everything this module writes is under the project's
  `.tfrepro/` (hidden from `git status`): checkouts, the run directory, the
  trial cache.
- Both ends are checked before anything else: a good end that is not healthy
  gives status "baseline-fails", a bad end without the symptom "error" (both
  exit 1 in the CLI). Nothing in between is tried then.
- The search is locked onto one symptom (`judge`): a commit that stops on
  something else (a syntax error, a crash while hunting a NaN) is a skip, and
  skips that hide the answer give `candidates`, never a guess.
- Every trial goes through the trial cache, so a rerun after an interruption
  pays only for the trials that never finished.
- All trials use one set of settings: the user's current `tfrepro.toml` (or
  the defaults) with the command-line overrides; only the code varies.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro.bisect import gitcopy
from tfrepro.bisect.rangesearch import STOPPERS, Mark, bisect_range, judge
from tfrepro.errors import TfreproError, UserError
from tfrepro.settings import WARMUP_STEPS, SymptomSettings, TrialSettings
from tfrepro.trials.state import StateDir, write_trial_record
from tfrepro.trials.values import SYMPTOM_ORDER, TrialResult, Verdict

if TYPE_CHECKING:
    from tfrepro.project import Project
    from tfrepro.trials.executors import Executor

# A trial of one project as written, under the given settings, labelled with
# the commit sha. The default runs `trial.run_trial` (cached); tests inject fakes.
TrialFn = Callable[["Project", TrialSettings, str], TrialResult]
# Progress for the CLI: event name ("trial", "range", "symptom") and details.
EventFn = Callable[[str, dict[str, Any]], None]

@dataclass(frozen=True)
class Tried:
    """One tried commit: what the search made of it."""

    commit: gitcopy.CommitInfo
    mark: Mark
    verdict: Verdict  # the target when bad, OK when good, UNTESTABLE when skipped
    shows: tuple[Verdict, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"sha": self.commit.sha, "subject": self.commit.subject,
                             "verdict": self.verdict.value,
                             "shows": [v.value for v in self.shows]}
        if self.reason:
            d["reason"] = self.reason
        return d


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _verdict_of(mark: Mark, target: Verdict) -> Verdict:
    return {Mark.BAD: target, Mark.GOOD: Verdict.OK, Mark.SKIP: Verdict.UNTESTABLE}[mark]


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


def _default_trial(state_dir: Path, use_cache: bool, executor: "Executor | None" = None) -> TrialFn:
    if executor is None:
        def run(project: "Project", settings: TrialSettings, label: str) -> TrialResult:
            from tfrepro.trials.runner import run_trial

            return run_trial(project, (), settings, use_cache=use_cache, label=label, state_dir=state_dir)

        return run
    from tfrepro.trials.executors import TrialRequest

    def request(settings: TrialSettings, label: str) -> TrialRequest:
        return TrialRequest((), settings, label, use_cache=use_cache, state_dir=state_dir)

    def on_executor(project: "Project", settings: TrialSettings, label: str) -> TrialResult:
        return executor.run_one(project, request(settings, label))

    # Timing trials (slowdown pairs) go to the executor's timed path: alone, same node.
    on_executor.timed = lambda project, settings, label: executor.run_timed(  # type: ignore[attr-defined]
        project, request(settings, label))
    return on_executor


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


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so cleanup runs as on Ctrl-C
    (SIGKILL cannot be caught: its leftovers are removed by the next run)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Bisection:
    """The state of one commit bisection (one instance per run)."""

    def __init__(self, rng: gitcopy.CommitRange, checkouts: gitcopy.Checkouts, trial: TrialFn,
                 settings: TrialSettings, symptoms: SymptomSettings, run_dir: Path,
                 on_event: EventFn) -> None:
        self.rng, self.checkouts, self.trial = rng, checkouts, trial
        self.settings, self.symptoms, self.run_dir = settings, symptoms, run_dir
        self.on_event = on_event
        self.projects: dict[str, Project | str] = {}  # sha -> project, or why it cannot load
        self.trials = 0
        self.cached = 0
        self.noise = 0.0
        self.tried: list[Tried] = []
        self.results: dict[str, TrialResult] = {}  # sha -> its first trial (repeat 0)
        self.table: list[dict[str, Any]] = []  # every trial, in order (result's trials_table)
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

    def run(self, commit: gitcopy.CommitInfo, repeat: int = 0, timed: bool = False) -> TrialResult | str:
        project = self.project(commit.sha)
        if isinstance(project, str):
            return project
        self.on_event("running", {"sha": commit.sha, "subject": commit.subject, "repeat": repeat})
        fn = getattr(self.trial, "timed", self.trial) if timed else self.trial
        result = fn(project, replace(self.settings, repeat=repeat), commit.sha)
        self.trials += 1
        if not result.could_not_run:
            self.results.setdefault(commit.sha, result)
        self.cached += bool(result.cached)
        rel = f"trials/{self.trials:03d}-{commit.sha[:12]}-r{repeat}"
        write_trial_record(self.run_dir / rel, full_summary(result), result.log_dir)
        entry = {"sha": commit.sha, "subject": commit.subject, "repeat": repeat, **trial_summary(result),
                 "key": result.key, "wall_s": result.wall_s, "summary": f"{rel}/summary.json"}
        self.table.append(entry)
        self.log.write(json.dumps(entry) + "\n")
        self.log.flush()
        self.on_event("trial", entry)
        if result.could_not_run:  # the executor lost it twice: a skip, never a verdict
            return result.error or "could not run"
        return result

    def shows(self, result: TrialResult, reference: TrialResult | None) -> frozenset[Verdict]:
        from tfrepro.trials.classify import symptoms

        return symptoms(result, reference=reference, settings=self.symptoms, noise=self.noise)

    def slowdown(self, good: gitcopy.CommitInfo, commit: gitcopy.CommitInfo) -> tuple[bool, str | None]:
        """Interleaved repeats of the good end and `commit` (outcome's
        sequential test); repeat i of each is cached, so reruns are free."""
        from tfrepro.trials.classify import sequential_slowdown

        def pair(i: int) -> tuple[float, float] | Verdict:
            a, b = self.run(good, i, timed=True), self.run(commit, i, timed=True)
            if isinstance(a, str) or isinstance(b, str):
                return Verdict.UNTESTABLE
            ta, tb = a.median_step_time(), b.median_step_time()
            if ta is None or tb is None or a.crashed or b.crashed or b.nonfinite:
                return Verdict.UNTESTABLE
            return ta, tb

        out = sequential_slowdown(pair, self.symptoms.slowdown, rng=random.Random(self.settings.seed))
        if out.stopped is not None:
            return False, f"could not be timed ({out.stopped.value})"
        return out.verdict is Verdict.SLOWDOWN, None

    def record(self, commit: gitcopy.CommitInfo, mark: Mark, verdict: Verdict,
               shows: frozenset[Verdict] = frozenset(), reason: str | None = None) -> Mark:
        order = [v for v in (*SYMPTOM_ORDER, Verdict.UNTESTABLE) if v in shows]
        self.tried.append(Tried(commit, mark, verdict, tuple(order), reason))
        self.on_event("tried", self.tried[-1].to_dict())
        return mark


def _first_symptom(shown: frozenset[Verdict]) -> Verdict | None:
    return next((v for v in SYMPTOM_ORDER if v in shown), None)


def bisect_commits(
    path: str | Path,
    good: str,
    bad: str,
    *,
    symptom: Verdict | None = None,
    settings: TrialSettings | None = None,
    symptoms: SymptomSettings | None = None,
    use_cache: bool = True,
    trial: TrialFn | None = None,
    on_event: EventFn | None = None,
    executor: "Executor | None" = None,
) -> dict[str, Any]:
    """Find the first commit in good..bad whose trial shows the symptom.

    Returns the Contract 4 object (also written to `<run_dir>/result.json`,
    with every trial logged in `<run_dir>/trials.jsonl`). Bad input raises
    UserError (exit 2); ends that do not hold give status "baseline-fails" /
    "error" with a `message`. `settings`/`symptoms` default to the user's
    current `tfrepro.toml`; `symptom` None hunts what the bad end shows
    (nan, crash, timeout, mismatch, slowdown in that order). `executor`
    (see `executors.py`) runs the trials; None runs them here, one at a time.
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
    state_dir = state.ensure()
    run_dir = state.new_run_dir()
    emit = on_event or (lambda kind, data: None)
    emit("range", {"good": rng.good.to_dict(), "bad": rng.bad.to_dict(), "commits": len(rng.commits),
                   "run_dir": str(run_dir)})
    trial = trial or _default_trial(state_dir, use_cache, executor)
    with _sigterm_interrupts(), gitcopy.Checkouts(state) as checkouts:
        b = _Bisection(rng, checkouts, trial, settings, symptoms, run_dir, emit)
        try:
            out = _search(b, rng, symptom)
        finally:
            b.log.close()
    failing = out.get("first_bad_commit") or rng.bad.sha
    verdicts = {t.commit.sha: t.verdict.value for t in b.tried}
    result = {
        "status": out["status"], "symptom": out.get("symptom"), "culprits": [],
        "baseline": out.get("baseline"),
        "failing": full_summary(b.results[failing]) if failing in b.results else None,
        "trials": b.trials, "cached_trials": b.cached,
        "wall_s": round(time.monotonic() - started, 3), "run_dir": _shown_path(run_dir),
        "first_bad_commit": out.get("first_bad_commit"), "commit": out.get("commit"),
        "candidates": out.get("candidates", []),
        "good": rng.good.to_dict(), "bad": rng.bad.to_dict(), "range_size": len(rng.commits),
        "tried": [t.to_dict() for t in b.tried],
        "project": str(root), "settings": settings.to_dict(),
        "trials_table": [
            {**row, "enabled": [], "role": f"commit {row['sha'][:12]}", "verdict": verdicts.get(row["sha"])}
            for row in b.table
        ],
        "error": out.get("message") if out["status"] != "found" else None,
    }
    if out.get("first_bad_commit"):
        # The two commits' projects, kept for the bug report (small: one directory each).
        for key, sha in (("good_project", rng.good.sha), ("first_bad_project", out["first_bad_commit"])):
            dest = run_dir / "commits" / sha[:12]
            gitcopy.materialize(rng.repo_root, sha, rng.relpath, dest)
            result[key] = str(dest)
    if "message" in out:
        result["message"] = out["message"]
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def _search(b: _Bisection, rng: gitcopy.CommitRange, symptom: Verdict | None) -> dict[str, Any]:
    good_c, bad_c = rng.good, rng.bad
    short = lambda c: c.sha[:12]  # noqa: E731

    # The good end: it must run cleanly, it is everybody's reference.
    g = b.run(good_c)
    if isinstance(g, str):
        b.record(good_c, Mark.SKIP, Verdict.UNTESTABLE, reason=g)
        return {"status": "error", "symptom": symptom and symptom.value,
                "message": f"the good end {short(good_c)} cannot be tried: {g}"}
    g_shows = b.shows(g, None)
    baseline = full_summary(g)
    bad_alone = (symptom is not None and symptom in g_shows) or bool(g_shows & STOPPERS)
    if bad_alone:
        b.record(good_c, Mark.BAD, symptom if symptom in g_shows else _first_symptom(g_shows),
                 g_shows, g.error)
        what = ", ".join(v.value for v in SYMPTOM_ORDER if v in g_shows)
        return {"status": "baseline-fails", "symptom": symptom and symptom.value, "baseline": baseline,
                "message": f"the good end {short(good_c)} ({good_c.subject}) already shows {what}"
                + (f": {g.error}" if g.error else "") + "; give an older --good"}
    # The bad end: it must show the symptom hunted (or one, to pick the hunt).
    x = b.run(bad_c)
    if isinstance(x, str):
        b.record(good_c, Mark.GOOD, Verdict.OK, g_shows)
        b.record(bad_c, Mark.SKIP, Verdict.UNTESTABLE, reason=x)
        return {"status": "error", "symptom": symptom and symptom.value, "baseline": baseline,
                "message": f"the bad end {short(bad_c)} cannot be tried: {x}"}
    x_shows = b.shows(x, g)
    target = symptom or _first_symptom(x_shows)
    if target is Verdict.MISMATCH:
        # The good end run twice says how much loss noise is inherent; a
        # "mismatch" within that noise is no symptom.
        g2 = b.run(good_c, repeat=1)
        if not isinstance(g2, str):
            from tfrepro.trials.classify import measure_noise

            b.noise = measure_noise(g, g2)
        x_shows = b.shows(x, g)
        target = symptom or _first_symptom(x_shows)
    if target is None and b.symptoms.slowdown and b.slowdown(good_c, bad_c)[0]:
        target = Verdict.SLOWDOWN
        x_shows = x_shows | {Verdict.SLOWDOWN}
    elif target is Verdict.SLOWDOWN and b.slowdown(good_c, bad_c)[0]:
        x_shows = x_shows | {Verdict.SLOWDOWN}
    b.record(good_c, Mark.GOOD, Verdict.OK, g_shows)
    if target is None or target not in x_shows:
        what = target.value if target else "any symptom (nan, crash, timeout, mismatch, slowdown)"
        shows = ", ".join(v.value for v in SYMPTOM_ORDER if v in x_shows) or "nothing"
        b.record(bad_c, Mark.GOOD, _first_symptom(x_shows) or Verdict.OK, x_shows)
        return {"status": "error", "symptom": target and target.value, "baseline": baseline,
                "message": f"the bad end {short(bad_c)} ({bad_c.subject}) does not show {what} "
                f"against the good end {short(good_c)} (it shows {shows})"}
    b.record(bad_c, Mark.BAD, target, x_shows)
    b.on_event("symptom", {"symptom": target.value})

    def test(c: gitcopy.CommitInfo) -> Mark:
        if c.sha == good_c.sha:
            return Mark.GOOD
        if c.sha == bad_c.sha:
            return Mark.BAD
        r = b.run(c)
        if isinstance(r, str):
            b.checkouts.release(c.sha)
            return b.record(c, Mark.SKIP, Verdict.UNTESTABLE, reason=r)
        shown = b.shows(r, g)
        if target is Verdict.SLOWDOWN and not shown & STOPPERS:
            slower, why = b.slowdown(good_c, c)
            if why:
                return b.record(c, Mark.SKIP, Verdict.UNTESTABLE, shown, why)
            shown = shown | {Verdict.SLOWDOWN} if slower else shown
        mark, reason = judge(shown, target, error=r.error, bad_error=x.error)
        b.checkouts.release(c.sha)
        return b.record(c, mark, _verdict_of(mark, target), shown, reason)

    found = bisect_range(rng.commits, test)
    out: dict[str, Any] = {"status": "found", "symptom": target.value, "baseline": baseline}
    if found.status == "found":
        out["first_bad_commit"] = found.first_bad.sha
        out["commit"] = found.first_bad.to_dict()
    else:  # "ambiguous": skips hide which candidate is the first bad one
        out["first_bad_commit"] = None
        out["candidates"] = [c.to_dict() for c in found.candidates]
        out["message"] = (f"{len(found.candidates)} candidate commits: the untestable ones among "
                          "them hide which one is the first bad one")
    return out
