"""The settings of a trial and of the symptoms (Contract 2): what `tfrepro.toml`
parses into. Pure values, below both the project (which parses the manifest)
and the trial runner (which runs with them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

# Steps at the start of a trial that never enter a timing comparison
# (tracing, XLA compilation).
WARMUP_STEPS = 3

# A timing trial's budget (DESIGN: "a time budget, not a fixed 40 steps of
# 3 ms"): steady steps until both this much steady time and this many steady
# steps are in, or `TIMING_STEPS_MAX` steps in all.
TIMING_MIN_TIME_S = 1.0
TIMING_MIN_STEPS = 30
TIMING_STEPS_MAX = 5000


# `--replicas` / `[trial] replicas`, at most.
MAX_REPLICAS = 64


@dataclass(frozen=True)
class TrialSettings:
    """How a trial runs (Contract 2, `[trial]`), minus `repeats`, which is the
    bisect's business. `repeat` distinguishes repeated runs of the same variant
    in the cache (timing and flakiness need independent samples).

    `steps_max` > 0 makes a timing trial: it runs until `min_time_s` of
    steady-state steps and `min_steps` steady steps are in (or `steps_max`
    steps), ignoring `steps`; its losses count over the first `steps` only
    (`classify.first_steps`). The three are left out of `to_dict` (the cache
    key) while `steps_max` is 0, so the keys of other trials do not change."""

    entry: str = "repro.py"
    command: tuple[str, ...] | None = None
    steps: int = 50
    timeout_s: float = 300.0
    seed: int = 0
    deterministic: bool = True
    repeat: int = 0
    # GPUs a trial gets: a count, "all", or None (auto: all visible GPUs when
    # the project has a distribution feature, else one; `trials/executors.py`).
    gpus: int | str | None = None
    # An address-space limit (RLIMIT_AS, MiB) the harness sets in the trial
    # process before the script runs: an OOM made reproducible. None: no limit.
    memory_limit_mb: int | None = None
    min_time_s: float = 0.0
    min_steps: int = 0
    steps_max: int = 0
    # The failing configuration's first trial runs "until its symptom": no
    # step cap, the script's own length, at most `budget_s` seconds of
    # training (`[trial] budget_s`, `--budget-s`); later trials then run to a
    # little past the step it showed (`late_steps`). Both are left out of
    # `to_dict` unless `until_symptom`, so other trials' cache keys stay.
    budget_s: float = 60.0
    until_symptom: bool = False
    # A NaN hunt's "nan-state" trial: the state before this step and its
    # batch are saved (inside/harness_keras.py). 0: none, and not in `to_dict`.
    save_state_step: int = 0
    # `--replicas N`: the harness splits one device into N logical ones before
    # the script's first op (inside/devices.py), unless N real GPUs are there.
    replicas: int | None = None
    # Keras 3's jit_compile="auto" pinned to what it resolved to in the
    # failing configuration (bisect/result_doc.py `pin_for`); None: not pinned.
    jit_auto: bool | None = None
    # A timing trial's calls to time (fit#2, ...: the ones the failing
    # configuration showed slower); () the first. In the key only when set.
    timed_calls: tuple[str, ...] = ()

    @property
    def timing(self) -> bool:
        return self.steps_max > 0

    def timed(
        self,
        budget_s: float = TIMING_MIN_TIME_S,
        min_steps: int = TIMING_MIN_STEPS,
        steps_max: int = TIMING_STEPS_MAX,
    ) -> "TrialSettings":
        """These settings for a timing trial: `budget_s` of steady steps and
        `min_steps` of them (room for the warm-up kept within `steps_max`)."""
        return replace(
            self, min_time_s=budget_s, min_steps=min_steps, steps_max=max(steps_max, WARMUP_STEPS + min_steps)
        )

    def to_dict(self) -> dict[str, object]:
        # absent while unset: the keys of other trials do not change
        unset = {
            **dict.fromkeys(("min_time_s", "min_steps", "steps_max"), not self.timing),
            **dict.fromkeys(("budget_s", "until_symptom"), not self.until_symptom),
            "save_state_step": not self.save_state_step,
            "replicas": self.replicas is None,
            "jit_auto": self.jit_auto is None,
            "timed_calls": not self.timing or not self.timed_calls,
        }
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if not unset.get(k)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, object]) -> "TrialSettings":
        """`to_dict`'s output read back (result.json, the trial cache)."""
        return cls(
            **{f.name: tuple(v) if isinstance(v := doc[f.name], list) else v for f in fields(cls) if f.name in doc}
        )


def late_steps(symptom_step: int, steps: int) -> int:
    """The steps every later trial runs once the failing configuration showed
    its symptom at `symptom_step`: `steps` when that is within them, else a
    little past it (10%, at least 5 steps), so a flaky repeat that shows it a
    few steps later is still seen."""
    return steps if symptom_step <= steps else symptom_step + max(5, symptom_step // 10)


@dataclass(frozen=True)
class SymptomSettings:
    """Contract 2, `[symptoms]`."""

    nan: bool = True
    slowdown: float = 1.25
    mismatch: float = 0.05
    memory: float = 1.5  # peak memory ratio (or steady growth the baseline lacks)


@dataclass(frozen=True)
class StateSettings:
    """`[state]` in tfrepro.toml: how much `.tfrepro/` keeps, and how many
    bytes a trial's variant may copy (files a copy-on-write clone cannot
    share)."""

    keep_runs: int = 20
    keep_trials: int = 200
    copy_budget_mb: float = 2048.0
    keep_mb: float = 4096.0  # trial dirs beyond this total go, oldest first (after keep_trials)
