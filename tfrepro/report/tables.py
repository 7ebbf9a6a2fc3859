"""Trials where users look: `trials.csv` and a TensorBoard HParams view of a
run directory, written after every bisect (feature, commit or version mode).

    <run_dir>/trials.csv          one row per trial
    <run_dir>/tensorboard/<NNN>/  one HParams session per trial: the features
                                  as boolean hparams (commit/version: the label),
                                  the verdict; metrics shows_symptom, final_loss,
                                  median_step_ms; the loss and step time per step

`tensorboard --logdir <run_dir>/tensorboard` shows them (HParams tab). Read
from result.json's trials table and each trial's summary.json; written with
tensorboardX (no TensorFlow).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tfrepro.report import events
from tfrepro.report.records import ResultJson
from tfrepro.trials.values import TrialResult, TrialRow


@dataclass(frozen=True)
class Row:
    """One trial: the CSV's columns, in order, then its summary and features (for TensorBoard)."""

    index: int
    role: str
    repeat: int
    label: str
    features_on: str
    verdict: str
    steps: int
    first_loss: float | None
    last_loss: float | None
    first_nonfinite_step: int | None
    median_step_ms: float | None
    wall_s: float | None
    cached: bool
    summary: TrialResult
    enabled: list[str]


COLUMNS = [f.name for f in fields(Row)][:-2]


def read_summary(run_dir: Path, row: TrialRow) -> TrialResult | None:
    """The trial's summary.json, or None (none recorded, or unreadable)."""
    try:
        doc = json.loads((run_dir / row["summary"]).read_text(encoding="utf-8")) if row.get("summary") else None
    except (OSError, json.JSONDecodeError):
        return None
    return None if doc is None else TrialResult.from_dict(doc)


def _median_ms(s: TrialResult) -> float | None:
    median = s.median_step_time()  # the trial's own rule, whether the summary wrote it or not
    return None if median is None else 1000.0 * median


def trial_rows(run_dir: Path, table: list[TrialRow]) -> list[Row]:
    """One row per trial of the run's trials table, in order."""
    rows = []
    for i, row in enumerate(table, 1):
        s = read_summary(run_dir, row) or TrialResult()
        losses = s.losses  # a non-finite loss (null) reads back as NaN
        label = row.get("version") or row.get("sha") or s.label or ""  # a commit's sha or a release
        rows.append(
            Row(
                index=i,
                role=row.get("role") or "",
                repeat=row.get("repeat", 0),
                label="" if label == row.get("role") else label,
                features_on=";".join(row.get("enabled") or []),
                verdict=row.get("verdict") or "",
                steps=s.steps_run or len(losses),
                first_loss=losses[0] if losses else None,
                last_loss=losses[-1] if losses else None,
                first_nonfinite_step=s.first_nonfinite_step,
                median_step_ms=_median_ms(s),
                wall_s=s.wall_s,
                cached=bool(row.get("cached")),
                summary=s,
                enabled=list(row.get("enabled") or []),
            )
        )
    return rows


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return v


def write_csv(path: Path, rows: list[Row]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows([_cell(getattr(r, c)) for c in COLUMNS] for r in rows)
    return path


def write_hparams(logdir: Path, rows: list[Row], features: list[str], wall_time: float) -> None:
    """One HParams session per trial under `logdir`."""
    for r in rows:
        metrics = {
            "shows_symptom": 0.0 if r.verdict in ("ok", "") else 1.0,
            "final_loss": math.nan if r.last_loss is None else r.last_loss,
            "median_step_ms": r.median_step_ms,
        }
        s, step = r.summary, max(1, r.steps or 0)
        hparams: dict[str, bool | str] = {f: f in r.enabled for f in features}
        if r.label and not features:  # a commit or version run: its label
            hparams["label"] = r.label
        hparams |= {"role": r.role, "verdict": r.verdict or "unknown"}
        scalars = {"loss": s.losses, "step_time_ms": [1000.0 * t for t in s.step_times]}
        events.write_run(
            logdir / f"{r.index:03d}_{events.safe_name(r.role, 80)}",
            scalars,
            wall_time=wall_time,
            hparams=hparams,
            metrics={k: (step, v) for k, v in metrics.items() if v is not None},
        )


def write_trial_tables(run_dir: Path) -> dict[str, Path]:
    """trials.csv and tensorboard/ (HParams) of a finished run; {} when the
    run has no trials table."""
    import time

    run_dir = Path(run_dir)
    result: ResultJson = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    rows = trial_rows(run_dir, result.get("trials_table") or [])
    if not rows:
        return {}
    csv_path = write_csv(run_dir / "trials.csv", rows)
    write_hparams(run_dir / "tensorboard", rows, list(result.get("features") or []), time.time())
    return {"trials.csv": csv_path, "tensorboard": run_dir / "tensorboard"}
