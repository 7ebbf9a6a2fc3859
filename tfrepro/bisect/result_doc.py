"""The answer of a feature bisection: `RunResult` (Contract 4) with its typed
evidence (`FeatureEvidence`: what the report and the display read), written
to `<run_dir>/result.json`.

The engine decides; this module only writes down what its trials showed:
the trial it names for each end and for the culprit configuration (one that
shows the symptom when there is one), the trials table, the timing evidence,
and every other symptom the failing configuration showed (`also_seen`);
and what actually ran (the compile pin, below: `pin_for`, `differing`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from tfrepro import __version__
from tfrepro.bisect.events import trial_row
from tfrepro.settings import TrialSettings
from tfrepro.trials import classify, slowdown
from tfrepro.trials.ddmin import Config
from tfrepro.trials.values import AlsoSeen, RunResult, Status, TrialResult, TrialRow, evidence_doc
from tfrepro.verdicts import STOPPERS, SYMPTOM_ORDER, Verdict

if TYPE_CHECKING:
    from tfrepro.bisect.engine import _Bisection


def best(run: _Bisection, cfg: Config | None, target: Verdict | None) -> TrialResult | None:
    """A trial of `cfg`, preferring one that shows `target` (None: no trial of it)."""
    mine = [t for (c, _r), t in sorted(run.memo.items(), key=lambda kv: kv[0][1]) if c == cfg]
    hits = [t for t in mine if target is not None and target in run._shows(cfg, t)]
    return (hits or mine)[0] if mine else None


def also_seen(
    shown: Iterable[Verdict],
    target: Verdict | None,
    *,
    ratio: float | None,
    slowdown: float,
) -> list[AlsoSeen]:
    """`also_seen` (Contract 3: a user who came for another symptom is told
    how to hunt it; pure): the symptoms in `shown` other than `target`, in
    the hunting order, and a possible slowdown when `ratio` (the fastest
    failing run over the fastest baseline run, `Ends.untimed_ratio`) is at
    least halfway to the `slowdown` threshold (an untimed, cheap comparison:
    the hint says to hunt it with timing trials)."""
    shown = set(shown)
    out = [
        AlsoSeen(v.value, f"rerun with --symptom {v.value}")
        for v in SYMPTOM_ORDER
        if v in shown and v != target and v != Verdict.SLOWDOWN
    ]
    if target != Verdict.SLOWDOWN and not shown & STOPPERS and ratio and ratio >= 1 + (slowdown - 1) / 2:
        r = round(ratio, 2)
        out.append(AlsoSeen("slowdown", f"possible slowdown x{r:g} (untimed runs): rerun with --symptom slowdown", r))
    return out


# -- the compile pin ------------------------------------------------------------
# What actually ran, across a hunt (Contract 3): Keras 3's `jit_compile="auto"`
# pinned to what it resolved to in the failing configuration, the trials that
# still compiled differently, and the one-replica note. Pure: trial results in,
# values out.
#
# Keras 3 resolves "auto" to XLA on a GPU only when no distribution strategy is
# active (`Trainer._resolve_auto_jit_compile`), so switching MirroredStrategy
# off would switch XLA on: two features would move when one is toggled. The
# failing configuration's resolution is the one every other trial gets.


def resolved(result: TrialResult) -> tuple[bool | None, ...]:
    """The compile mode each compile of the trial resolved to, in order."""
    return tuple(m.get("jit_compile") for m in result.compile_modes if str(m.get("call", "")).startswith("compile#"))


def pin_for(failing: TrialResult) -> bool | None:
    """The value a detected "auto" resolved to in the failing configuration
    (its first compile that asked for "auto"), or None: nothing to pin."""
    auto = (m.get("jit_compile") for m in failing.compile_modes if m.get("requested") == "auto")
    return next((j for j in auto if isinstance(j, bool)), None)


def auto_differs(result: TrialResult, pin: bool) -> bool:
    """A trial run before the pin was known whose "auto" resolved otherwise
    (it must run again, pinned)."""
    return any(
        m.get("requested") == "auto" and not m.get("pinned") and m.get("jit_compile") not in (None, pin)
        for m in result.compile_modes
    )


class CompileDiff(TypedDict):
    """A configuration whose resolved jit_compile differs from the failing one's."""

    configuration: list[str]
    jit_compile: list[str]
    failing_jit_compile: list[str]


def differing(failing: TrialResult | None, trials: Iterable[tuple[tuple[str, ...], TrialResult]]) -> list[CompileDiff]:
    """The trials whose resolved compile modes differ from the failing
    configuration's (a feature toggled `jit_compile` itself, say): each with
    its configuration and both modes; none when the failing one did not run."""
    want = resolved(failing) if failing is not None else ()
    out: dict[tuple[str, ...], CompileDiff] = {}  # the first trial of each configuration
    for enabled, result in trials:
        if want and (got := resolved(result)) and got != want:
            out.setdefault(
                enabled, CompileDiff(configuration=list(enabled), jit_compile=list(got), failing_jit_compile=list(want))
            )
    return list(out.values())


def one_replica_note(failing: TrialResult, replicas: int | None) -> str | None:
    """Why a strategy hunt may have seen nothing: the failing configuration
    built a multi-device strategy that had a single replica."""
    strategies = [s for s in failing.extra.get("strategies") or [] if s.get("strategy") != "OneDeviceStrategy"]
    if replicas or not strategies or any(s.get("replicas", 1) > 1 for s in strategies):
        return None
    names = sorted({s.get("strategy", "a strategy") for s in strategies})
    return (
        f"only one replica was available: {', '.join(names)} ran on a single device, so it computed "
        "what the default strategy computes; rerun with --replicas 2 (or [trial] replicas = 2 in "
        "tfrepro.toml) to split the device into 2 logical ones and test it with 2 replicas"
    )


@dataclass(frozen=True)
class Answer:
    """What the engine concluded, for `finish` to write down: the status, the
    symptom and what names it (culprits, the configuration that shows it,
    suspects of a flaky run, its reproduction rate), an error, and `extra`:
    fields of its FeatureEvidence (an unknown name is a TypeError)."""

    status: Status
    symptom: Verdict | None
    culprits: Config = frozenset()
    config: Config | None = None
    suspects: Config = frozenset()
    rate: float | None = None
    error: str | None = None
    extra: Mapping[str, Any] | None = None
    reason: str | None = None


@dataclass(frozen=True)
class FeatureEvidence:
    """What a feature bisection's trials showed beyond the typed answer, for
    the report and the display: the result document's other keys (Contract 4),
    in this order, written by `to_dict` only. The OPTIONAL ones are only in
    some answers (a baseline that fails, an engine error, a note, a cost that
    explains a `none`) and left out when not given."""

    cached_trials: int = 0
    project: str = ""
    settings: TrialSettings = TrialSettings()
    late_step: Mapping[str, Any] | None = None
    nan_state: Mapping[str, Any] | None = None
    repeats: int = 1
    features: tuple[str, ...] = ()
    affects_loss: tuple[str, ...] = ()
    failing: TrialResult | None = None
    culprit_trial: TrialResult | None = None
    dropped_features: tuple[Mapping[str, str], ...] = ()
    fixed_on: tuple[str, ...] = ()  # kept ON in every trial (--only/--skip, preflight drops)
    detected: bool = False
    culprit_config: tuple[str, ...] = ()
    ablation: Mapping[str, str] | None = None
    trials_table: tuple[TrialRow, ...] = ()
    noise: float = 0.0
    timing: slowdown.TimingOutcome | None = None
    version: str = __version__
    warnings: tuple[str, ...] = ()  # what trials said about themselves (e.g. XLA dropped under determinism)
    compile_differs: tuple[CompileDiff, ...] = ()
    timed_calls: tuple[str, ...] = ()
    symptom_call: str | None = None
    checks: Mapping[str, Any] | None = None
    baseline_flaky: bool | None = None
    traceback: str | None = None
    note: str | None = None
    own_cost: Mapping[str, Any] | None = None
    combined_cost: Mapping[str, Any] | None = None

    OPTIONAL = frozenset({"checks", "baseline_flaky", "traceback", "note", "own_cost", "combined_cost"})

    def to_dict(self) -> dict[str, object]:
        return evidence_doc(self, self.OPTIONAL)


def _evidence(run: _Bisection, a: Answer) -> FeatureEvidence:
    """What the trials showed, for the report and the display (`a.extra`:
    the answer's own fields of FeatureEvidence, e.g. `ablation`, `own_cost`)."""
    full, symptom, config = frozenset(run.features), a.symptom, a.config
    # the timing evidence: the last comparison of `config` (else of the failing configuration, else the first made)
    timed = config if config in run.timing else full if full in run.timing else next(iter(run.timing), None)
    # the trials that stand (a trial re-run pinned replaced its first run), for their jit_compile
    kept = [(r.enabled, r.result) for r in run.records if run.memo.get((frozenset(r.enabled), r.repeat)) is r.result]
    for rec in run.records:  # each with its verdict: judged now for the trials the search did not judge itself
        if rec.verdict is None:
            rec.verdict = classify.primary(run._shows(frozenset(rec.enabled), rec.result), symptom)
    texts = {}  # zero-edit: the variant's lines are the annotated text's, not the file's (`symptom_call`)
    detection = run.project.detection
    for rel, annotated in (detection.texts if detection is not None else {}).items():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            texts[rel] = (annotated, (Path(run.project.root) / rel).read_text(encoding="utf-8"))
    named = config if config is not None else full  # the training call (fit#2, file:line) the symptom shows in
    call = classify.symptom_call(best(run, named, symptom), symptom, run.timed_calls, classify.where_mapper(texts))
    return FeatureEvidence(
        project=str(Path(run.project.root).resolve()),
        settings=run.settings,
        repeats=run.k,
        features=tuple(run.features),
        affects_loss=tuple(sorted(run.affects_loss)),
        fixed_on=tuple(sorted(run.project.fixed_on)),
        detected=run.project.detected,
        dropped_features=tuple(run.dropped),
        late_step=run.late_step,
        nan_state=run.nan_state,
        failing=best(run, full, symptom),
        culprit_trial=best(run, config, symptom),
        culprit_config=tuple(sorted(config)) if config is not None else (),
        trials_table=tuple(trial_row(r, r.verdict.value) for r in run.records),
        cached_trials=sum(r.result.cached for r in run.records),
        noise=run.noise,
        timing=run.timing[timed][-1] if timed is not None else None,
        warnings=tuple(sorted({w for r in run.records for w in r.result.extra.get("warnings", [])})),
        compile_differs=tuple(differing(run.memo.get((full, 0)), kept)),
        timed_calls=run.timed_calls,
        symptom_call=call,
        **(a.extra or {}),
    )


def finish(run: _Bisection, a: Answer) -> RunResult:
    """The run's answer from the bisection `run` (its trials, settings and
    run dir), written to `<run_dir>/result.json`."""
    from tfrepro.catalog import known_cost

    cost = None  # a found slowdown whose culprits are documented costs on the hardware their trials ran on
    if a.status is Status.FOUND and a.symptom is Verdict.SLOWDOWN:
        hw = next(
            (t.extra["hardware"] for (c, _r), t in run.memo.items() if c == a.culprits and t.extra.get("hardware")), {}
        )
        cost = known_cost(sorted(a.culprits), a.symptom.value, hw, run.project.description)
    # every other symptom the failing configuration showed (`also_seen`; timed: no "possible" slowdown to guess)
    full, doubt = frozenset(run.features), run.memory_doubt
    shown = set().union(*(run._shows(full, t) for t in run._end_runs()[1]))
    ratio = None if full in run.timing else run.untimed_ratio()
    hint = f"memory ({doubt}): rerun with --symptom memory --repeats 3 to hunt it"
    seen = also_seen(shown, a.symptom, ratio=ratio, slowdown=run.symptom_settings.slowdown)
    result = RunResult(
        a.status,
        a.symptom,
        tuple(sorted(a.culprits)),
        baseline=best(run, frozenset(), a.symptom),
        reproduction_rate=a.rate,
        suspects=tuple(sorted(a.suspects)),
        also_seen=tuple(replace(s, hint=hint) if s.symptom == Verdict.MEMORY.value and doubt else s for s in seen),
        error=a.error,
        reason=a.reason,
        known_cost=cost,
    )
    return run.log.answer(result, _evidence(run, a))
