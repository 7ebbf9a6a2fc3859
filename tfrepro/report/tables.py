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
import statistics
from pathlib import Path
from typing import Any

from tfrepro.report import events

COLUMNS = [
    "index",
    "role",
    "repeat",
    "label",
    "features_on",
    "verdict",
    "steps",
    "first_loss",
    "last_loss",
    "first_nonfinite_step",
    "median_step_ms",
    "wall_s",
    "cached",
]
WARMUP = 2  # as trials/values.WARMUP_STEPS: the first steps are tracing and compilation


def _summary(run_dir: Path, row: dict[str, Any]) -> dict[str, Any]:
    try:
        return json.loads((run_dir / row["summary"]).read_text(encoding="utf-8")) if row.get("summary") else {}
    except (OSError, json.JSONDecodeError):
        return {}


def _median_ms(s: dict[str, Any]) -> float | None:
    if s.get("median_step_time") is not None:
        return 1000.0 * s["median_step_time"]
    steady = (s.get("step_times") or [])[WARMUP:]
    return 1000.0 * statistics.median(steady) if steady else None


def _label(row: dict[str, Any], s: dict[str, Any]) -> str:
    """A commit's sha or a release (feature trials have none)."""
    label = row.get("version") or row.get("sha") or s.get("label") or ""
    return "" if label == row.get("role") else label


def trial_rows(run_dir: Path, result: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per trial of the run (the CSV's columns), in order."""
    rows = []
    for i, row in enumerate(result.get("trials_table") or [], 1):
        s = _summary(run_dir, row)
        losses = [math.nan if x is None else x for x in s.get("losses") or []]  # null: non-finite
        rows.append(
            {
                "index": i,
                "role": row.get("role") or "",
                "repeat": row.get("repeat", 0),
                "label": _label(row, s),
                "features_on": ";".join(row.get("enabled") or []),
                "verdict": row.get("verdict") or "",
                "steps": s.get("steps_run", len(losses)),
                "first_loss": losses[0] if losses else None,
                "last_loss": losses[-1] if losses else None,
                "first_nonfinite_step": s.get("first_nonfinite_step"),
                "median_step_ms": _median_ms(s),
                "wall_s": s.get("wall_s"),
                "cached": bool(row.get("cached")),
                "_summary": s,
                "_enabled": list(row.get("enabled") or []),
            }
        )
    return rows


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return v


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_cell(r[c]) for c in COLUMNS])
    return path


def _hparams(r: dict[str, Any], features: list[str]) -> dict[str, bool | str]:
    hp: dict[str, bool | str] = {f: f in r["_enabled"] for f in features}
    if r["label"] and not features:
        hp["label"] = r["label"]
    hp["role"] = r["role"]
    hp["verdict"] = r["verdict"] or "unknown"
    return hp


def write_hparams(logdir: Path, rows: list[dict[str, Any]], features: list[str], wall_time: float) -> int:
    """One HParams session per trial under `logdir`; returns how many."""
    for r in rows:
        s = r["_summary"]
        step = max(1, r["steps"] or 0)
        metrics = {
            "shows_symptom": 0.0 if r["verdict"] in ("ok", "") else 1.0,
            "final_loss": math.nan if r["last_loss"] is None else r["last_loss"],
            "median_step_ms": r["median_step_ms"],
        }
        scalars = {"loss": s.get("losses") or [], "step_time_ms": [1000.0 * t for t in s.get("step_times") or []]}
        events.write_run(
            logdir / f"{r['index']:03d}_{_safe(r['role'])}",
            scalars,
            wall_time=wall_time,
            hparams=_hparams(r, features),
            metrics={k: (step, v) for k, v in metrics.items() if v is not None},
        )
    return len(rows)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in name)[:80]


def write_trial_tables(run_dir: Path, result: dict[str, Any] | None = None) -> dict[str, Path]:
    """trials.csv and tensorboard/ (HParams) of a finished run; {} when the
    run has no trials table."""
    import time

    run_dir = Path(run_dir)
    if result is None:
        result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    rows = trial_rows(run_dir, result)
    if not rows:
        return {}
    features = list(result.get("features") or [])
    out = {"trials.csv": write_csv(run_dir / "trials.csv", rows)}
    write_hparams(run_dir / "tensorboard", rows, features, time.time())
    out["tensorboard"] = run_dir / "tensorboard"
    return out
