"""The settings of a trial and of the symptoms (Contract 2): what `tfrepro.toml`
parses into. Pure values, below both the project (which parses the manifest)
and the trial runner (which runs with them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

# Steps at the start of a trial that never enter a timing comparison
# (tracing, XLA compilation).
WARMUP_STEPS = 3


@dataclass(frozen=True)
class TrialSettings:
    """How a trial runs (Contract 2, `[trial]`), minus `repeats`, which is the
    bisect's business. `repeat` distinguishes repeated runs of the same variant
    in the cache (timing and flakiness need independent samples)."""

    entry: str = "repro.py"
    command: tuple[str, ...] | None = None
    steps: int = 50
    timeout_s: float = 300.0
    seed: int = 0
    deterministic: bool = True
    repeat: int = 0
    # GPUs a trial gets: a count, "all", or None (auto: all visible GPUs when
    # the project has a distribution feature, else one; `trials/gpus.py`).
    gpus: int | str | None = None
    # An address-space limit (RLIMIT_AS, MiB) the harness sets in the trial
    # process before the script runs: an OOM made reproducible. None: no limit.
    memory_limit_mb: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command) if self.command is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrialSettings":
        d = dict(d)
        if d.get("command") is not None:
            d["command"] = tuple(d["command"])
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


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
