"""The bisection's two ends. The rules of every mode (feature mode here,
range mode in `ranges.check_ends`): what makes the good end fail
(`BASELINE_FAILURES`), an end trial the executor lost (`lost`), an end that
cannot be measured (`classify.ends_reason`), then a clean early exit as a
crash (`early_exit`), the symptom the hunt locks onto (`pick_symptom`), a
timing that stopped (`timing_stop`, `untimed`).

The `Ends` mixin of `engine._Bisection`: the preflight, the baseline and the
failing configuration, the late step and the compile pin, the symptom by
evidence (a marginal memory signal does not preempt a decisive one), and
the baseline's sanity checks. It reads and sets the bisection's state
(memo, settings, noise) and calls its trial methods.

The late step: a fixed 50 steps misses a NaN that first shows at step 600
(an export sorted by one column, no shuffle, the bad rows in the last
batches of the epoch). Without `--steps`, the failing configuration's first
trial runs with no step cap, for the script's own length and at most
`[trial] budget_s` seconds of training (`TrialSettings.until_symptom`). When
it shows a NaN or a crash past `steps`, every later trial runs to a little
past that step (`settings.late_steps`), and the trials already run at the
shorter length (the baseline, the mismatch reference) are judged again at
the new one (`within_steps`)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfrepro.bisect import result_doc
from tfrepro.settings import late_steps
from tfrepro.trials import classify, slowdown
from tfrepro.trials.ddmin import Config
from tfrepro.trials.trial import Purpose, TrialOptions
from tfrepro.trials.values import RunResult, Status, TrialResult
from tfrepro.verdicts import STOPPERS, SYMPTOM_ORDER, Verdict

# What makes the good end (the baseline) unusable in every mode, judged
# alone (MEMORY is then an out-of-memory kill, as much a failure as a crash).
BASELINE_FAILURES = STOPPERS | {Verdict.MEMORY}


def early_exit(
    shown: frozenset[Verdict], result: TrialResult, good: TrialResult | None, steps: int
) -> frozenset[Verdict]:
    """What a trial shows, in every mode: `shown` (its own symptoms), or a
    crash when it showed nothing but ended cleanly with fewer training steps
    than the good end's run `good` (at most `steps`): a feature that makes
    the script exit early (`sys.exit(0)` after 3 of 40 steps) is no healthy
    run. A `fit` that one of the script's callbacks stopped
    (`model.stop_training`: EarlyStopping and its kin) ended as the script
    asked, not early; nor did a trial the harness itself stopped (a timing
    trial at its budget). The ends rule (`ends_reason`) judges the ends on
    their own symptoms first: an end that exits before its first step is
    `untestable`, not a crash."""
    if shown or good is None or result.crashed or result.timed_out or result.could_not_run or result.nonfinite:
        return shown
    extra = result.extra or {}
    # a callback stopped it, or tfrepro's harness did (a timing budget, the step cap)
    if extra.get("callback_stops") or extra.get("stop") not in (None, "exit"):
        return shown
    return frozenset({Verdict.CRASH}) if result.steps_run < min(good.steps_run, steps) else shown


def lost(end: str, runs: Iterable[TrialResult | str]) -> str | None:
    """Why the run answers `error`, in every mode: a trial of `end` the
    executor lost twice (range mode's point gives the reason it could not be
    tried instead); no verdict, not even `none`, can stand on it."""
    for t in runs:
        why = t if isinstance(t, str) else (t.error or "could not run") if t.could_not_run else None
        if why:
            return f"{end} cannot be tried: {why}"
    return None


def timing_stop(result: TrialResult, shown: frozenset[Verdict]) -> Verdict:
    """What stops timing a candidate, in every mode (`TimingPool`'s
    failure; `shown`: what the mode judged its timing trial to show): it
    could not run (UNTESTABLE), it went NaN, crashed or timed out, or it was
    killed for memory (a memory growth is no reason to stop); else OK."""
    if result.could_not_run:
        return Verdict.UNTESTABLE
    return classify.primary(shown & (BASELINE_FAILURES if classify.is_oom(result) else STOPPERS))


def untimed(outcomes: list[slowdown.TimingOutcome] | None) -> str | None:
    """Why the last timing comparison of a candidate (`outcomes`: its
    comparisons, `TimingPool.outcomes`) decided nothing, in every mode: once
    no symptom was picked, a slowdown asked for of an end that `could not be
    timed (crash)` is `untestable` ("none" would be a guess); None: it
    decided, or it was not timed."""
    stopped = outcomes[-1].stopped if outcomes else None
    return f"could not be timed ({stopped.value})" if stopped is not None else None


def pick_symptom(
    shown: Iterable[Verdict],
    asked: Verdict | None,
    *,
    memory_stands: Callable[[], bool] = lambda: True,
    slower: Callable[[], bool] = lambda: False,
) -> Verdict | None:
    """The symptom the hunt locks onto, in every mode, from what the failing
    end showed untimed (`shown`); None: nothing to hunt.

    - `asked` (a slowdown aside): it when shown, else None;
    - nothing asked: the first of SYMPTOM_ORDER shown, memory only when
      `memory_stands()` (feature mode re-runs a marginal signal; an
      out-of-memory kill, range mode's only memory verdict, always stands);
    - else (a slowdown asked, or nothing else shown): SLOWDOWN when the
      mode's timing comparison says `slower()` (its screen, its trials)."""
    shown = frozenset(shown)
    if asked is not None and asked is not Verdict.SLOWDOWN:
        return asked if asked in shown else None
    if asked is None:
        for v in SYMPTOM_ORDER:
            if v in shown and (v is not Verdict.MEMORY or memory_stands()):
                return v
    return Verdict.SLOWDOWN if slower() else None


class Ends:
    def _both_ends(self) -> RunResult | None:
        """The baseline (twice at least: the second run measures the noise)
        and the failing configuration; `error` when the executor lost one of
        their trials (`lost`), `baseline-fails` when the baseline already
        fails, `untestable` when an end cannot be measured, else None (and
        `self.noise` is set)."""
        k, base, full = self.k, frozenset(), frozenset(self.features)
        wanted = [(base, r, Purpose.BASELINE) for r in range(max(k, 2))]
        wanted += self._needs(full, range(k), Purpose.FAILING, self.opts.symptom)
        self._many(wanted)
        self._late(full, wanted)
        self._pin_compile(full)
        base_runs, fail_runs = self._end_runs()
        why = lost("the baseline", base_runs) or lost("the failing configuration", fail_runs)
        if why is not None:
            return self._finish(Status.ERROR, self.opts.symptom, error=why)
        base_shown = [classify.symptoms(t, reference=None, settings=self.symptom_settings) for t in base_runs]
        base_fail = [bool(s & BASELINE_FAILURES) for s in base_shown]
        if not any(base_fail):
            self.noise = classify.measure_noise(base_runs[0], base_runs[1])
            # `untestable` (Contract 4) when an end ran no training step or the symptom could not be measured
            # (`classify.ends_reason`): the failing configuration judged on its own symptoms, before `early_exit`
            failed = any(self._shows(full, t, early=False) & STOPPERS for t in fail_runs)
            reason = classify.ends_reason(base_runs, fail_runs, self.opts.symptom, failed=failed)
            if reason is not None:
                return self._finish(Status.UNTESTABLE, self.opts.symptom, error=reason, reason=reason)
            return None
        first, shown = next((t, classify.primary(s)) for t, s in zip(base_runs, base_shown) if s & BASELINE_FAILURES)
        checks = self._baseline_checks(shown)
        reason = f"; sanity {checks['reason']}" if checks.get("reason") else ""
        # the baseline as it ran: every feature off but those its preflight kept on (the suspects)
        on, suspects = [d["name"] for d in self.dropped], ""
        if on:
            suspects = (
                f"; {' or '.join(on)} {'is' if len(on) == 1 else 'are'} the suspect: always on (no OFF stand-in runs), "
                "so the bisection cannot clear it; fix its else part by hand and bisect again"
            )
        words = f"every feature off except {', '.join(on)}, always on" if on else "every feature off"
        why = f"{first.error or 'see its logs'}{reason}{suspects}"
        return self._finish(
            Status.BASELINE_FAILS,
            shown,
            rate=sum(base_fail) / len(base_fail),
            error=f"the baseline ({words}) already shows {shown.value}: {why}",
            extra={"checks": checks, "baseline_flaky": not all(base_fail)},
        )

    def _late(self, full: Config, wanted: list[tuple[Config, int, Purpose]]) -> None:
        """The failing configuration's run until its symptom showed it past
        `steps`: later trials run to a little past that step, and what ran at
        the shorter length (`wanted`) runs again (its records stay in the run
        dir). Run on to reach the later training calls, those cannot be
        measured when the baseline crashes past the old steps (an OFF part
        breaks the code between the calls: a checkpoint the script reads
        back): back to the old steps and what ran at them, said in
        result.json's `late_step`."""
        if not self.until_symptom:
            return
        explored, old = self.memo[(full, 0)], self.settings.steps
        # the step it first showed a NaN or a crash at (a NaN only in the final weights, a crash: its last step)
        step = explored.first_nonfinite_step
        if step is None and (explored.crashed or explored.weights_finite is False):
            step = max(1, explored.steps_run)
        if step is not None and step > old:
            new, why = late_steps(step, old), f"showed it at step {step}"
        elif step is None:  # reach the calls a capped trial never starts (`later_calls_steps`)
            new, why = later_calls_steps(explored, old), "ran training calls past the steps"
        else:
            return
        if new is None or new <= old:
            return
        self.settings = replace(self.settings, steps=new)
        self.late_step = {"symptom_step": step, "steps_before": old, "steps": new, "budget_s": self.settings.budget_s}
        self.events.phase(f"the failing configuration {why}: trials now run {self.settings.steps}")
        memo = dict(self.memo)
        with self.lock:
            self.memo = {(full, 0): explored}
        self._many(wanted)  # again, at the steps past the late symptom
        crashed = [t for t in self._end_runs()[0] if t.crashed and t.steps_run > old]
        if step is not None or not crashed:
            return
        why = f"the baseline crashes after step {crashed[0].steps_run} ({crashed[0].error or 'see its logs'})"
        self.settings = replace(self.settings, steps=old)
        self.late_step = {**self.late_step, "steps": old, "later_calls": f"not measured: {why}"}
        self.events.phase(f"the later training calls are not measured: {why}; trials run {old} steps")
        with self.lock:
            self.memo = memo

    def _pin_compile(self, full: Config) -> None:
        """Keras 3's jit_compile="auto" pinned to what the failing
        configuration resolved it to (`result_doc.pin_for`); the trials that
        ran before the pin was known and resolved otherwise run again."""
        pin = result_doc.pin_for(self.memo[(full, 0)])
        if pin is None or self.settings.jit_auto is not None:
            return
        self.settings = replace(self.settings, jit_auto=pin)
        stale = [k for k, r in self.memo.items() if result_doc.auto_differs(r, pin)]
        self.memo = {k: r for k, r in self.memo.items() if k not in stale}
        self._many([(c, r, "pinned") for c, r in stale])

    def _preflight(self) -> None:
        """The baseline must run: a feature whose OFF part breaks it is kept ON,
        no candidate (`preflight`, with the engine's executor; a phase is
        announced only when the baseline crashes)."""
        request, calls = self._request(frozenset(), 0, Purpose.BASELINE), []

        def run(p: Any) -> TrialResult:
            if len(calls) == 1:
                self.events.phase("preflight: the baseline crashes; looking for a feature whose OFF part breaks it")
            calls.append(p)
            self.events.trial_started((), Purpose.BASELINE if len(calls) == 1 else Purpose.PREFLIGHT, 0)
            return self.executor.run_batch(p, [request])[0]

        got = preflight(self.project, run)
        for d in got.dropped:
            self.events.phase(f"dropped {d['name']}: {d['reason']}")
        self.project, self.dropped, self.features = got.project, got.dropped, tuple(got.project.feature_names)
        self.affects_loss = frozenset(got.project.affects_loss)
        self._record(frozenset(), 0, Purpose.BASELINE, got.baseline)

    def _baseline_checks(self, shown: Verdict) -> dict[str, Any]:
        """`tfrepro check` on the baseline, so that `baseline-fails` comes with
        a reason (one more trial, through the injected runner; never raises)."""
        timeout = "the baseline timed out: a probed run of it would time out as well"
        if shown == Verdict.TIMEOUT or self.opts.baseline_checks is None:
            why = timeout if shown == Verdict.TIMEOUT else "no sanity checks were asked for"
            return {"status": "skipped", "reason": None, "checks": [], "error": why}
        self.events.phase("sanity checks on the baseline")
        how = TrialOptions(use_cache=self.opts.use_cache)
        return self.opts.baseline_checks(self.project, (), self.settings, runner=self.runner, how=how)

    def _slower(self, full: Config) -> bool:
        """The failing configuration timed against the baseline; when no
        slowdown was asked, only past a cheap pre-screen: the fastest runs
        so far (the least disturbed by parallel trials) at least a quarter
        of the way to the threshold. Halfway missed a uniform 1.4x
        (mixed_float16 on a CPU MLP) when its short, untimed runs happened
        to be disturbed (journey suite). A later call slower
        (`self.timed_calls`) passes the screen too."""
        if self.opts.symptom is None and not self.timed_calls:
            ratio = self.untimed_ratio()
            if ratio is None or ratio < self._screen():
                return False
        self.events.phase("timing the failing configuration against the baseline")
        return self._timed(full).verdict == Verdict.SLOWDOWN

    def _memory_stands(self, full: Config) -> bool:
        """Symptom choice by evidence: a memory signal near its threshold is
        re-run (`_memory_verdicts`); one the repeats do not confirm, or a
        marginal one while the untimed runs show a slowdown past its
        threshold, does not preempt the other symptoms (it stays in also_seen)."""
        verdict = self._memory_verdicts([full]).get(full)
        if verdict is None:  # not near its threshold
            return True
        confirmed = verdict == Verdict.MEMORY
        ratio = self.untimed_ratio()
        slower = (ratio is not None and ratio >= self.symptom_settings.slowdown) or bool(self.timed_calls)
        self.memory_doubt = "marginal, not confirmed by repeats" if not confirmed else "marginal"
        return confirmed and not slower

    def _screen(self) -> float:
        """The slowdown pre-screen: a quarter of the way to the threshold
        (for the untimed ends, and for a later call's steps)."""
        return 1 + (self.symptom_settings.slowdown - 1) / 4

    def _end_runs(self) -> tuple[list[TrialResult], list[TrialResult]]:
        """The baseline's runs (`max(k, 2)`: the noise needs two) and the
        failing configuration's (`k`), those made so far."""
        ends = ((frozenset(), max(self.k, 2)), (frozenset(self.features), self.k))
        base, full = ([t for r in range(n) if (t := self.memo.get((c, r))) is not None] for c, n in ends)
        return base, full

    def untimed_ratio(self) -> float | None:
        """How much slower the failing configuration's fastest untimed run is
        than the baseline's (the fastest: the least disturbed by parallel
        trials), over the end runs made so far; None when either end has no
        step time (or the baseline's is 0)."""
        mb, mf = (
            min((m for t in runs if (m := slowdown.timing_sample(t)) is not None), default=None)
            for runs in self._end_runs()
        )
        return mf / mb if mb and mf is not None else None


# -- preflight: the baseline must run ----------------------------------------
_NAME_RE = re.compile(r"(?:NameError|UnboundLocalError)\b.*?'(?P<name>[A-Za-z_]\w*)'")
_ATTR_RE = re.compile(r"AttributeError\b.*?attribute '(?P<name>[A-Za-z_]\w*)'")
_QUOTED_RE = re.compile(r"['\"](?P<name>[A-Za-z_]\w*)['\"]")


@dataclass
class PreflightResult:
    project: Any  # the project to bisect (features dropped, if any)
    baseline: TrialResult  # its baseline trial (the last one run)
    dropped: list[dict[str, str]] = field(default_factory=list)


def broken(result: TrialResult) -> bool:
    """A crash of the baseline that a feature's OFF part may cause."""
    return result.crashed and not result.timed_out and not result.could_not_run


def suspects(project: Any, error: str | None) -> list[str]:
    """Candidate features, the likeliest culprits of `error` first."""
    names = list(project.feature_names)
    words = [m.group("name") for rx in (_NAME_RE, _ATTR_RE, _QUOTED_RE) for m in rx.finditer(error or "")]
    score: dict[str, int] = {}
    for src in project.sources.values():
        for b in src.blocks:
            if b.name not in names:
                continue
            text = "".join(src.lines[b.on_part[0] : b.on_part[1]])
            hits = sum(1 for w in words if re.search(rf"\b{re.escape(w)}\b", text))
            score[b.name] = max(score.get(b.name, 0), hits)
    return sorted(names, key=lambda n: (-score.get(n, 0), names.index(n)))


def preflight(project: Any, run: Callable[[Any], TrialResult]) -> PreflightResult:
    """Run the baseline of `project`; when it crashes, find and drop the
    features whose OFF part breaks it. The baseline (every feature OFF) must
    run before a bisect.

    An OFF part that compiles can still break code further down: a callback
    object used after `fit`, a layer looked up by name, a strategy whose scope
    is used later. Annotated blocks (zero-edit or `annotate --write`) are only
    checked to compile, so the engine calls `preflight` on its baseline trial
    first. When that trial crashes:

    1. suspects first: blocks whose ON part mentions the name of a NameError /
       UnboundLocalError / AttributeError, then every other feature;
    2. each suspect ON alone in the baseline: the first that makes the baseline
       run is dropped (kept ON in every variant, no longer a candidate); one
       that only changes the crash is dropped too and the search goes on (two
       broken OFF parts), for a few rounds;
    3. if no combination runs, nothing is dropped and the engine reports
       `baseline-fails` as before (the baseline is broken on its own).

    Every drop says which feature and why (`dropped_features: [{name, reason}]`).
    Pure logic over an injected `run(project) -> TrialResult`: tested with fakes.
    """
    first = run(project)
    if not broken(first) or not project.feature_names:
        return PreflightResult(project, first)
    current, result, dropped = project, first, []
    for _ in range(3):  # rounds: a broken OFF part dropped in each
        changed = None
        breaks = f"its OFF part breaks the baseline ({result.error or 'it crashes'}"  # + how it ends below
        for name in suspects(current, result.error):
            got = run(current.exclude({name: "preflight"}))
            if not broken(got):
                dropped.append({"name": name, "reason": f"{breaks}); kept ON, not a candidate"})
                kept_on = project.exclude({d["name"]: "preflight: " + d["reason"] for d in dropped})
                return PreflightResult(kept_on, got, dropped)
            if changed is None and got.error != result.error:
                changed = (name, got)
        if changed is None:
            break
        name, got = changed
        dropped.append({"name": name, "reason": f"{breaks}; the baseline still crashes further on); kept ON"})
        current, result = current.exclude({name: "preflight"}), got
    return PreflightResult(project, first)


# -- the late step and the nan-state trial ------------------------------------
def later_calls_steps(result: TrialResult, steps: int) -> int | None:
    """The steps a trial needs to reach every training call that the run until
    its symptom ran and a `steps`-long trial never starts (fit#2 of a script
    whose fit#1 alone is longer than `steps`: a slowdown there is in no capped
    trial): up to the last such call's start plus `steps` (at most what the run
    ran). None when every call starts within `steps`."""
    starts = [c.start for c in classify.calls_of(result) if c.start >= steps and c.end > c.start]
    return max(steps, min(result.steps_run, max(starts) + steps)) if starts else None


# The repeat index of the nan-state trial (apart from every search and replay index).
NAN_STATE_REPEAT = 900
NAN_STATE_DIR = "nan_state"


def save_nan_state(run, config) -> dict | None:
    """For a NaN: rerun `config` (seeded, deterministic) to its first NaN step,
    saving the state before that step and its batch (`harness_keras.StateSaver`),
    copied to `<run_dir>/nan_state/`. Returns result.json's `nan_state`, or
    None when the NaN showed in no loss (only in the weights at the end)."""
    first = run.memo.get((config, 0))
    step = first.first_nonfinite_step if first is not None else None
    if not step:
        return None
    request = run._request(config, NAN_STATE_REPEAT, Purpose.NAN_STATE, steps=step, save_state_step=step)
    run.events.phase(f"saving the state before the NaN step {step}")
    got = run._record(config, NAN_STATE_REPEAT, Purpose.NAN_STATE, run.executor.run_batch(run.project, [request])[0])
    src = Path(got.log_dir or "") / NAN_STATE_DIR
    doc = {"step": step, "dir": None, "config": sorted(config), "deterministic": run.settings.deterministic}
    if got.log_dir and (src / "state.npz").is_file() and (src / "batch.npz").is_file():
        shutil.copytree(src, run.run_dir / NAN_STATE_DIR, dirs_exist_ok=True)
        doc["dir"] = NAN_STATE_DIR
    else:
        doc["error"] = "the nan-state trial saved no state (a custom loop, or no Keras fit)"
    return doc


def within_steps(result: TrialResult, steps: int) -> TrialResult:
    """The view at `steps` of a trial that ran past them (the run until its
    symptom, the script's whole length): its RSS series cut at `steps`, so a
    longer run is not judged against a shorter baseline's peak and growth;
    and a timeout after `steps` is not one at `steps` (the trials compared
    with it stop there: on a loaded machine the whole-length run can reach
    the trial's time limit, and its timeout, seen in no capped trial, made a
    healthy script `flaky`). A NaN or a crash past `steps` moves every trial
    past it instead (`Ends._late`)."""
    if result.steps_run <= steps:
        return result
    if result.timed_out:
        result = replace(result, timed_out=False, extra={**result.extra, "timed_out_at_step": result.steps_run})
    if not result.rss_per_step:
        return result
    stride = max(1, int((result.extra.get("memory") or {}).get("stride") or 1))
    series = result.rss_per_step[: max(1, -(-steps // stride))]
    peak = min(max(series), result.peak_rss_bytes or max(series))
    return replace(result, rss_per_step=series, peak_rss_bytes=peak, growth_per_step=None, steps_run=steps)
