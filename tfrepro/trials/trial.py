"""One trial, as one value from the engine to the process: `Trial` (the
features ON, the settings, `TrialOptions`: how it runs) is what the engine
asks an executor for, what the executor's spawner (`LocalExecutor`: warm or
cold processes; `RayExecutor`: Ray tasks) runs through `runner.run_trial`,
and, with the variant's hash, what the trial cache key is made of
(`runner.trial_key`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro.settings import TrialSettings
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project


class Purpose(StrEnum):
    """Why a bisection runs a trial: its role in the run (the trials table's
    `role`, the trial's label, what the progress line says). A range mode's
    trial is a point's ("commit <sha12>", "tf <version>"), no purpose."""

    BASELINE = "baseline"  # every feature OFF, at least twice: the second measures the noise
    PREFLIGHT = "preflight"  # the all-OFF variant again, a feature whose OFF part broke it kept ON
    FAILING = "failing"  # every feature ON
    REFERENCE = "reference"  # only the affects_loss features ON: a mismatch's reference
    SEARCH = "search"
    MEMORY_REPEAT = "memory-repeat"  # more runs of a memory decision near its threshold
    TIMING = "timing"  # a timing trial of a configuration (B C B pairs)
    TIMING_BASELINE = "timing-baseline"  # the shared pool's baseline timing trials
    REPLAY = "replay"
    REPLAY_BASELINE = "replay-baseline"
    REPLAY_WITHOUT = "replay-without"  # the culprit configuration without one culprit
    NAN_STATE = "nan-state"  # a NaN's state before its step, for the report's replay.py


@dataclass(frozen=True)
class TrialOptions:
    """How one trial runs besides its settings: the one value `run_trial`
    and `run_variant` take.
    `env` is part of the cache key; `unkeyed_env` is not (the GPU a trial is
    pinned to: any GPU of the box gives the same trial), nor is `cold` (a
    warm and a cold process give the same trial: tests/test_warm.py).
    `python` runs the trial under another interpreter (a version
    environment), whose `versions` enter the key and the result."""

    use_cache: bool = True
    label: str = ""
    state_dir: Path | None = None  # None: the project's `.tfrepro`
    env: Mapping[str, str] | None = None
    unkeyed_env: Mapping[str, str] | None = None
    plugins: Sequence[Path] = ()
    plugin_options: Mapping[str, Any] | None = None
    python: str | None = None
    versions: Mapping[str, str | None] | None = None
    cold: bool = False


@dataclass(frozen=True)
class Trial:
    """One trial the engine wants: the features ON, its settings, how it
    runs (`how.label`: its role in the run)."""

    enabled: tuple[str, ...]
    settings: TrialSettings
    how: TrialOptions = TrialOptions()
    # The project to run, when it is not the batch's (commit mode: one per commit).
    project: "Project | None" = field(default=None, compare=False)
    # A result known already (version mode's injected trial in tests): nothing runs.
    given: TrialResult | None = field(default=None, compare=False)
