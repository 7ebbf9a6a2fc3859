"""The JSON documents the report reads from disk, as written there: the
bisect's result.json (its trial summaries: TrialResult.from_dict), the
data reads the harness recorded (inside/harness_data.py), the settings the
localize plugin records (the environment probe's facts: answer.Env).
Only the keys the report reads are named; the others pass through as they
are, so what is written back (result.json, report.json) is unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from tfrepro.trials.values import TrialRow  # result.json's trials table, as the bisect writes it


class DataDoc(TypedDict, total=False):
    sources: list[dict[str, Any]]  # standin.Read: call, file, at (file:line), value (what it returned)
    fits: list[dict[str, Any]]  # at, kind, sources_seen, batches_per_epoch


class ResultJson(TypedDict, total=False):
    """result.json (bisect/result_doc.py), the keys the report reads by name."""

    status: str
    symptom: str
    project: str
    settings: dict[str, Any]
    features: list[str]
    culprits: list[str]
    culprit_config: list[str]
    affects_loss: list[str]
    fixed_on: list[str]
    baseline: dict[str, Any]  # trial summaries (trials/values.py `summary`), `data` a DataDoc
    failing: dict[str, Any]
    culprit_trial: dict[str, Any]
    trials_table: list[TrialRow]
    timing: dict[str, Any]
    timed_calls: list[str]
    known_cost: dict[str, Any]
    noise: float
    nan_state: dict[str, Any] | None  # dir, step
    nightly: dict[str, Any]  # an older run's record: nightly.NightlyRun's keys
    version_trials: list[dict[str, Any]]
    first_bad_commit: str | None
    first_bad_project: str
    good_project: str
    good: dict[str, Any]  # sha


def run_dirs(runs: Path) -> list[Path]:
    """The run directories (those holding a result.json) under `runs`, oldest first."""
    found = (d for d in runs.iterdir() if (d / "result.json").is_file())
    return sorted(found, key=lambda d: (d.stat().st_mtime, d.name))


class RuntimeSettings(TypedDict, total=False):  # inside/localize_plugin.py: `settings` (scan.merge_runtime)
    precision_policy: str | None
    replicas: int | None
    jit_compile_requested: list[str]
    op_determinism: bool | None
    run_functions_eagerly: bool | None
