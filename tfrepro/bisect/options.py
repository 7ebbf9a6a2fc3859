"""What the user asked a bisection for (`tfrepro bisect` flags), as one
frozen value; None means "from tfrepro.toml". Feature mode reads every field;
commit and version modes the symptom, steps, cache, executor and timing ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tfrepro.errors import UserError
from tfrepro.settings import TIMING_MIN_STEPS, TIMING_MIN_TIME_S, TIMING_STEPS_MAX, WARMUP_STEPS, TrialSettings
from tfrepro.verdicts import SYMPTOM_ORDER, Verdict


def parse_symptom(text: str | None) -> Verdict | None:
    """`--symptom NAME` -> the symptom hunted (None: the first one shown); an
    unknown name is a UserError (exit 2)."""
    if not text:
        return None
    found = next((v for v in SYMPTOM_ORDER if v.value == text), None)
    if found is None:
        raise UserError(f"unknown symptom {text!r}", hint="one of: " + ", ".join(v.value for v in SYMPTOM_ORDER))
    return found


@dataclass(frozen=True)
class BisectOptions:
    """What the user asked for (CLI flags); None means "from tfrepro.toml"."""

    symptom: Verdict | None = None
    strategy: str = "auto"
    steps: int | None = None
    # seconds of training the failing configuration's run until its symptom
    # may take (None: [trial] budget_s); only without `steps`
    budget_s: float | None = None
    repeats: int | None = None
    jobs: int = 1
    use_cache: bool = True
    replays: int = 3  # fresh runs of the culprit (and of the baseline) at the end
    # Slowdown hunts. A pair is one candidate timing trial between two
    # baseline ones; a clear-cut pair decides alone (slowdown.TimingPair.clear).
    timing_min: int = 3  # pairs before the rank test is consulted (it can pass from 5 on)
    timing_max: int = 16  # new pairs per comparison, at most
    timing_replays: int = 1  # fresh pairs the replay adds to the evidence, at least
    timing_budget_s: float = TIMING_MIN_TIME_S  # steady-state seconds a timing trial measures
    timing_min_steps: int = TIMING_MIN_STEPS  # ... and steady steps, at least
    timing_steps_max: int = TIMING_STEPS_MAX  # ... and steps in all, at most
    executor: str = "local"  # where trials run: "local" (`jobs` at a time) or "ray"
    address: str | None = None  # the Ray cluster to join (None: start a local one)
    replicas: int | None = None  # --replicas N: one device split into N logical ones (None: [trial])
    # Why a failing baseline fails: `tfrepro.check.run.checks_for_result`,
    # injected by the CLI (commands never import each other).
    baseline_checks: Callable[..., dict[str, Any]] | None = None

    def trial_settings(self, settings: TrialSettings) -> TrialSettings:
        """The settings of every trial, in every mode: `settings` (`[trial]`)
        with the command-line overrides (--steps, --budget-s, --replicas). A
        --budget-s past the timeout raises UserError."""
        if self.budget_s is not None and self.budget_s >= settings.timeout_s:
            raise UserError(
                f"--budget-s {self.budget_s:g} must be less than the trial timeout "
                f"({settings.timeout_s:g} s, [trial] timeout_s)",
                hint="give a smaller --budget-s, or raise [trial] timeout_s",
            )
        given = {k: v for k in ("steps", "budget_s", "replicas") if (v := getattr(self, k)) is not None}
        return replace(settings, repeat=0, **given)

    def timing_settings(self, settings: TrialSettings) -> TrialSettings:
        """`settings` for a timing trial: a time budget of steady steps, not `steps`."""
        return settings.timed(self.timing_budget_s, self.timing_min_steps, self.timing_steps_max)

    def refuse_short_slowdown(self, settings: TrialSettings) -> None:
        """A slowdown hunt whose trials end within the warm-up steps times nothing: UserError (every mode)."""
        if self.symptom is Verdict.SLOWDOWN and settings.steps < WARMUP_STEPS + 2:
            raise UserError(
                f"a slowdown needs steps past the {WARMUP_STEPS} warm-up steps",
                hint=f"use --steps {WARMUP_STEPS + 10} or more",
            )
