"""`tfrepro bisect` orchestration: the edge that runs trials and writes the run dir.

The engine gets its trial runner and its event handler injected (the pattern
of mozregression's `Bisector`): `runner` defaults to `trial.run_trial`, and a
fake one makes the status logic testable in milliseconds. It decides nothing
by itself: `trials/classify.py` says what a trial shows, `trials/ddmin.py` which
configuration to try next, `replay.py` whether a replayed answer stands.

The sequence, and the status each step can end with:

1. both ends first: the baseline (every feature OFF, run at least twice: the
   second run measures the loss noise) and the failing configuration (every
   feature ON), `repeats` times each. A baseline that fails -> `baseline-fails`.
2. the symptom: `--symptom`, or the first of nan, crash, timeout, mismatch,
   slowdown that the failing configuration shows and the baseline does not.
   None shown -> `none`.
3. the search, locked onto that symptom: ablation and/or ddmin (a slowdown,
   whose timing pairs run one at a time: `ddmin.halving`, ddmin's cheaper
   one-test-per-round form).
4. replay: the culprit configuration and the baseline run again with fresh
   repeat indices (a slowdown: fresh timing pairs added to the evidence the
   search gathered, decided again over all of it). The answer stands
   (`found`) only if every culprit trial showed the symptom and no baseline
   trial did; otherwise the result is flaky: `status: flaky` (exit 4), the
   observed `reproduction_rate`,
   no culprit named (the configuration the search ended on is kept as
   `suspects`).

Repeat indices are a pure function of (configuration, role, round), so a
bisect that is interrupted and run again asks for exactly the same trials and
gets every finished one from the trial cache. Timing trials (a slowdown hunt)
run one at a time with a time budget (`TrialSettings.steps_max` & co.),
against one shared pool of baseline timing trials (trials/timing.py).
"""

from __future__ import annotations

import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from tfrepro.bisect import result_doc
from tfrepro.bisect.ends import Ends, early_exit, pick_symptom, save_nan_state, timing_stop, untimed, within_steps
from tfrepro.bisect.events import BisectEvents, BisectOptions, TrialLog, TrialRecord
from tfrepro.bisect.replay import Replay
from tfrepro.errors import TfreproError, UserError
from tfrepro.trials import classify, slowdown
from tfrepro.trials.classify import decide_memory
from tfrepro.trials.ddmin import Config, Oracle, ablation, ddmin, halving
from tfrepro.trials.executors import Executor, Runner, make_executor
from tfrepro.trials.state import StateDir
from tfrepro.trials.timing import TimingPool
from tfrepro.trials.trial import Purpose, Trial, TrialOptions
from tfrepro.trials.values import RunResult, Status, TrialResult
from tfrepro.verdicts import STOPPERS, Verdict

Wanted = tuple[Config, int, Purpose]  # a trial the run wants: (configuration, repeat, why)
STRATEGIES = ("auto", "ablation", "ddmin")
_MEMORY_CLOSE = 500  # repeat-index base of the extra runs of a close memory decision
_MEMORY_EXTRA = 2
SEARCH_ALPHA_NOT_SLOWER = 0.25  # the search's "not slower": 3 consistent pairs (p = 1/8)
# In the search a subset decided "slower" shows the failing configuration's
# slowdown only when its ratio is at least that ratio ** SEARCH_SHARE (a third
# of its log: the largest of three equal independent costs): a 1.3x bystander
# does not stand for a 13x slowdown (journey J15). The decision itself, its
# costs and the replay against the threshold are unchanged.
SEARCH_SHARE = 1 / 3


def bisect(
    project: Any,
    options: BisectOptions = BisectOptions(),
    *,
    runner: Runner | None = None,
    events: BisectEvents | None = None,
    clock: Callable[[], float] = time.monotonic,
    run_id: str | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Bisect `project` (a `tfrepro.project.Project`); see the module docstring.
    Writes `.tfrepro/runs/<id>/result.json` and returns the same result.
    Trials run on `executor`, by default the one `options` names (an injected
    `runner` becomes a local executor's runner)."""
    own = executor is None
    executor = executor or make_executor(options.executor, jobs=options.jobs, address=options.address, runner=runner)
    if runner is None:
        from tfrepro.trials.runner import run_trial as runner
    try:
        return _Bisection(project, options, runner, events or BisectEvents(), clock, run_id, executor).run()
    finally:
        if own:
            executor.close()


def _slug(enabled: Iterable[str]) -> str:
    text = "+".join(enabled) or "baseline"
    return text if len(text) <= 60 else text[:50] + f"-{zlib.crc32(text.encode()):08x}"


class _Bisection(Ends, Replay):
    def __init__(
        self,
        project,
        options: BisectOptions,
        runner: Runner,
        events: BisectEvents,
        clock: Callable[[], float],
        run_id: str | None,
        executor: Executor,
    ) -> None:
        if options.strategy not in STRATEGIES:
            raise UserError(f"unknown strategy {options.strategy!r}", hint="use auto, ablation or ddmin")
        self.project, self.opts, self.runner, self.events = project, options, runner, events
        manifest = project.manifest
        # every trial's settings: `[trial]` with the command-line overrides, as in every mode
        self.settings = options.trial_settings(manifest.trial)
        # Without --steps the failing configuration runs until its symptom (ends.py: the late step).
        self.until_symptom = options.steps is None
        self.late_step: dict | None = None
        self.nan_state: dict | None = None  # ends.save_nan_state: the state before the NaN step
        self.k = max(1, options.repeats or manifest.repeats)
        self.symptom_settings = manifest.symptoms
        self.features: tuple[str, ...] = tuple(project.feature_names)
        self.affects_loss = frozenset(project.affects_loss)
        self.executor = executor
        self.unshown: list[TrialRecord] = []  # recorded, not yet judged for the progress line
        self.target: Verdict | None = None  # the symptom hunted, once picked
        self.memo: dict[tuple[Config, int], TrialResult] = {}
        self.lock = threading.Lock()
        self.noise = 0.0
        self.timing_pool = TimingPool(
            self._trial,
            lambda c, t: timing_stop(t, self._shows(c, t)),
            manifest.symptoms.slowdown,
            steps=self.settings.steps,
        )
        self.timing = self.timing_pool.outcomes
        self.dropped: list[dict[str, str]] = []
        self.timed_calls: tuple[str, ...] = ()  # what timing trials time (`classify.slower_calls`)
        self.memory_doubt: str | None = None  # why a memory signal did not decide the hunt
        if not project.feature_names:  # bad input, before any trial (as a slowdown without steps to time)
            raise UserError(
                "the project has no feature blocks to bisect",
                path=project.root,
                hint="mark features with `# tfrepro: feature NAME` ... `# tfrepro: end`",
            )
        options.refuse_short_slowdown(self.settings)
        self.log = TrialLog(StateDir.of(project.root), run_id, clock=clock)
        self.run_dir, self.records = self.log.run_dir, self.log.records

    # -- trials ------------------------------------------------------------
    def _request(self, config: Config, repeat: int, role: Purpose, *, timed: bool = False, **changes: int) -> Trial:
        """The trial of `config`; `timed`: a timing trial (a time budget of steady steps, `_trial`);
        `changes`: settings of its own (the nan-state trial's steps)."""
        settings = replace(self.settings, repeat=repeat, **changes)
        if role is Purpose.FAILING and repeat == 0 and self.until_symptom:
            settings = replace(settings, until_symptom=True)
        if timed:
            settings = replace(self.opts.timing_settings(settings), timed_calls=self.timed_calls)
        return Trial(tuple(sorted(config)), settings, TrialOptions(label=role, use_cache=self.opts.use_cache))

    def _trial(self, config: Config, repeat: int, role: Purpose) -> TrialResult:
        """One timing trial (alone: see `_timed`), or a memo hit."""
        with self.lock:
            if (config, repeat) in self.memo:
                return self.memo[(config, repeat)]
        self.events.trial_started(tuple(sorted(config)), role, repeat)
        return self._record(
            config, repeat, role, self.executor.run_timed(self.project, self._request(config, repeat, role, timed=True))
        )

    def _record(self, config: Config, repeat: int, role: Purpose, result: TrialResult) -> TrialResult:
        key, enabled = (config, repeat), tuple(sorted(config))
        with self.lock:
            if key in self.memo:  # another thread ran it meanwhile
                return self.memo[key]
            self.memo[key] = result
            self.unshown.append(self.log.add(enabled, role, repeat, result, f"{role}-{_slug(enabled)}"))
            ready = self._judged_now()
        for rec in ready:
            self.events.trial_finished(rec)
        return result

    def _judged_now(self) -> list[TrialRecord]:
        """The recorded trials the engine can judge now, each with its verdict
        (`live`), in the order they finished: a trial waits for its mismatch
        reference and for the baselines (memory, loss noise) it is judged
        against, so the progress line shows what the engine decides, never a
        verdict made without them. Called under the lock."""
        base = self._memory_baselines()
        if base and not self.noise:  # as _both_ends sets it
            self.noise = classify.measure_noise(base[0], base[1])
        ready = [
            r for r in self.unshown if self._reference(frozenset(r.enabled)) is not None and (base or not r.enabled)
        ]
        for rec in ready:
            rec.live = classify.primary(self._shows(frozenset(rec.enabled), rec.result), self.target)
            self.unshown.remove(rec)
        return ready

    def _many(self, wanted: list[Wanted]) -> None:
        """Run independent non-timing trials on the executor, as a batch.
        On Ctrl-C it starts nothing new; the running trials finish and are cached."""
        first: dict[tuple[Config, int], Wanted] = {}
        for c, r, role in wanted:
            if (c, r) not in self.memo:
                first.setdefault((c, r), (c, r, role))
        todo = list(first.values())
        self.executor.run_batch(
            self.project,
            [self._request(c, r, role) for c, r, role in todo],
            on_start=lambda i: self.events.trial_started(tuple(sorted(todo[i][0])), todo[i][2], todo[i][1]),
            on_result=lambda i, res: self._record(*todo[i], res),
        )

    # -- judging -----------------------------------------------------------
    def _reference(self, config: Config) -> TrialResult | None:
        """The mismatch reference of `config`: only its affects_loss features
        on (None when that trial was not run)."""
        return self.memo.get((frozenset(config) & self.affects_loss, 0))

    def _shows(self, config: Config, result: TrialResult, *, early: bool = True) -> frozenset[Verdict]:
        """What `result` shows (`early`: with the clean early exit as a crash, `ends.early_exit`)."""
        result = classify.first_steps(result, self.settings.steps)  # a timing trial runs longer
        if self.until_symptom:  # the failing run until its symptom ran longer too (ends.py: the late step)
            result = within_steps(result, self.settings.steps)
        shown = classify.symptoms(
            result,
            reference=self._reference(config),
            settings=self.symptom_settings,
            noise=self.noise,
            baselines=self._memory_baselines(),
        )
        good = self.memo.get((frozenset(), 0)) if early else None
        return early_exit(shown, result, good, self.settings.steps)

    def _memory_baselines(self) -> list[TrialResult]:
        """The baseline runs memory is compared with (the first two, once both ran)."""
        base = self._end_runs()[0]
        return base if len(base) == max(self.k, 2) else []

    def _memory_verdicts(self, configs: list[Config]) -> dict[Config, Verdict]:
        """A memory decision near its threshold is not trusted from `k` runs:
        such configurations get `_MEMORY_EXTRA` more runs and the majority decides."""
        base, thr = self._memory_baselines(), self.symptom_settings.memory
        close = [c for c in configs if any(decide_memory(self.memo[(c, r)], base, thr).close for r in range(self.k))]
        extra = range(_MEMORY_CLOSE, _MEMORY_CLOSE + _MEMORY_EXTRA)
        self._many([(c, r, Purpose.MEMORY_REPEAT) for c in close for r in extra])
        out = {}
        for c in close:
            shows = [Verdict.MEMORY in self._shows(c, self.memo[(c, r)]) for r in [*range(self.k), *extra]]
            out[c] = (
                Verdict.MEMORY
                if 2 * sum(shows) > len(shows)
                else classify.primary(self._shows(c, self.memo[(c, 0)]) - {Verdict.MEMORY})
            )
        return out

    def _needs(self, config: Config, repeats: Iterable[int], role: Purpose, target: Verdict | None) -> list[Wanted]:
        wanted = [(config, r, role) for r in repeats]
        if target in (None, Verdict.MISMATCH) and config & self.affects_loss:
            wanted.append((config & self.affects_loss, 0, Purpose.REFERENCE))
        return wanted

    def _verdict(self, config: Config, target: Verdict) -> Verdict:
        shown = [self._shows(config, self.memo[(config, r)]) for r in range(self.k)]
        return target if any(target in s for s in shown) else classify.primary(shown[0])

    def test_batch(self, target: Verdict, *, ahead: bool = False) -> Callable[[list[Config]], list[Verdict]]:
        """The search's test of `target` (`ahead`: with the first replay trial, `_test_final`)."""

        def run(configs: list[Config]) -> list[Verdict]:
            if target == Verdict.SLOWDOWN:  # timing trials never run concurrently
                # A wrong "not slower" in the search costs trials, never the
                # answer (halving tests its answer, the replay re-times it):
                # one clear pair says it even on a loaded machine, and the
                # rank test at SEARCH_ALPHA_NOT_SLOWER (3 pairs, not 5).
                return [self._timed(c, search=True).verdict for c in configs]
            wanted = [w for c in configs for w in self._needs(c, range(self.k), Purpose.SEARCH, target)]
            self._many(wanted + [(c, self._fresh().start, Purpose.REPLAY) for c in configs if ahead])
            memory = self._memory_verdicts(configs) if target == Verdict.MEMORY else {}
            return [memory.get(c) or self._verdict(c, target) for c in configs]

        return run

    def _test_final(self, target: Verdict) -> Callable[[list[Config]], list[Verdict]] | None:
        """ddmin's last pair ({x}, {y}) with a slot to spare: {x} runs beside
        the one-run replay's trial of {x}, not beside {y}. Serial ddmin tests
        {y} only when {x} does not fail; the replay's trial is the one the
        answer {x} needs next (`replay._replayed`), so running it now ends the
        hunt a round sooner when {x} is the culprit, and costs the one trial
        {y}'s run would have when it is not. Only where the one-run replay can
        apply (a NaN, crash or timeout, deterministic settings, no loss noise)
        and a slot is free beside the search's `repeats` runs."""
        if target not in STOPPERS or not self._one_run_replay_applies(target) or self.k >= self.executor.slots:
            return None
        return self.test_batch(target, ahead=True)

    def _timed(
        self, config: Config, fresh: int = 1, *, search: bool = False, explains: bool = False
    ) -> slowdown.TimingOutcome:
        """The timing comparison of `config` against the baseline (trials/timing.py);
        `search`: the search's looser "not slower" (one clear pair even on a
        loaded machine, the rank test at SEARCH_ALPHA_NOT_SLOWER); `search`
        or `explains`: "slower" only at SEARCH_SHARE of the failing
        configuration's slowdown (`_search_share`)."""
        o = self.opts
        policy = slowdown.SequentialPolicy(min_new=fresh, min_samples=o.timing_min, max_samples=o.timing_max)
        if search:
            policy = replace(policy, loaded_not_slower=1, alpha_not_slower=SEARCH_ALPHA_NOT_SLOWER)
        got = self.timing_pool.timed(config, policy, at_least=self._search_share() if search or explains else 0.0)
        for rec in self.records:
            if rec.role == Purpose.TIMING and frozenset(rec.enabled) == config:
                rec.verdict = got.verdict
        return got

    def _search_share(self) -> float:
        """The least ratio a search subset's "slower" must have to count:
        SEARCH_SHARE of the failing configuration's log-ratio (0 before it is timed)."""
        full = self.timing.get(frozenset(self.features))
        ratio = full[-1].ratio if full else None
        return ratio**SEARCH_SHARE if ratio and ratio > 1 else 0.0

    # -- the run -----------------------------------------------------------
    def run(self) -> RunResult:
        try:
            return self._run()
        except UserError:
            raise
        except (TfreproError, OSError) as e:
            return self._finish(Status.ERROR, None, error=str(e))
        except Exception as e:  # a bug must still leave one JSON object and a run dir
            return self._finish(
                Status.ERROR, None, error=f"{type(e).__name__}: {e}", extra={"traceback": traceback.format_exc()}
            )

    def _run(self) -> RunResult:
        self.events.phase("baseline and failing configuration")
        self._preflight()
        stopped = self._both_ends()  # error, baseline-fails, untestable
        if stopped is not None:
            return stopped
        # timing trials time the calls the failing configuration ran slower than the baseline (fit#2...)
        self.timed_calls = classify.slower_calls(*self._end_runs(), self._screen())
        full = frozenset(self.features)
        shown = set().union(*(self._shows(full, t) for t in self._end_runs()[1]))
        target = self.target = pick_symptom(  # memory by evidence, a slowdown by its timing
            shown, self.opts.symptom, memory_stands=lambda: self._memory_stands(full), slower=lambda: self._slower(full)
        )
        # a slowdown asked for of a failing configuration that could not be timed: `untestable`, as in range mode
        if target is None and self.opts.symptom is Verdict.SLOWDOWN and (why := untimed(self.timing.get(full))):
            why = f"the failing configuration {why}"
            return self._finish(Status.UNTESTABLE, Verdict.SLOWDOWN, error=why, reason=why)
        if target is None:
            note = result_doc.one_replica_note(self.memo[(full, 0)], self.settings.replicas)
            return self._finish(Status.NONE, self.opts.symptom, extra={"note": note} if note else None)
        culprits, config, table = self._search(target)
        if target == Verdict.NAN:
            self.nan_state = save_nan_state(self, config)
        return self._replay(target, culprits, config, table)

    def _search(self, target: Verdict) -> tuple[Config, Config, dict[str, Verdict] | None]:
        """Ablation and/or ddmin locked onto `target` -> (culprits, the
        configuration that shows it, the ablation table or None). For a
        mismatch, the affects_loss features are context, never culprits: the
        oracle knows from the start that they alone show no mismatch (they
        are their own reference)."""
        base, full = frozenset(), frozenset(self.features)
        mismatch = target == Verdict.MISMATCH
        fixed = self.affects_loss if mismatch else frozenset()
        known = {base: Verdict.OK, full: target}
        if mismatch:
            known.update({fixed: Verdict.OK, **{frozenset({f}): Verdict.OK for f in fixed}})
        oracle = Oracle(
            self.test_batch(target),
            target,
            batch_size=1 if target == Verdict.SLOWDOWN else self.executor.slots,
            known=known,
            test_final=self._test_final(target),
        )
        items = [f for f in self.features if f not in fixed]
        table: dict[str, Verdict] | None = None
        culprits: Config | None = None
        strategy = self.opts.strategy
        if strategy == "ablation" or (
            strategy == "auto"
            and (len(items) <= 4 or (self.executor.slots >= len(items) and target != Verdict.SLOWDOWN))
        ):
            self.events.phase(f"ablation: each feature alone ({target.value})")
            table = ablation(self.features, oracle)
            alone = [f for f in items if table[f] == target]
            culprits = frozenset(alone[:1]) or None
        if culprits is None:  # a slowdown's timing pairs run one at a time: one test per round (ddmin.halving)
            name, search = ("halving", halving) if target == Verdict.SLOWDOWN else ("delta debugging", ddmin)
            self.events.phase(f"{name} ({target.value})")
            culprits = search(items, oracle, fixed=fixed)
        if mismatch and fixed:  # the affects_loss context the mismatch needs, minimised too
            return culprits, culprits | ddmin(sorted(fixed), oracle, fixed=culprits), table
        return culprits, culprits, table

    def _finish(self, status: Status, symptom: Verdict | None, **kw: Any) -> RunResult:
        """The run's answer (`result_doc.Answer`: culprits, config, suspects,
        rate, error, extra, reason), written to `<run_dir>/result.json`."""
        return result_doc.finish(self, result_doc.Answer(status, symptom, **kw))
