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

An event file (`write_run`; one run directory holds one): each series as
`simple_value` scalars at steps 1, 2, ... (TensorBoard's scalars dashboard),
optionally an HParams session (the HParams dashboard: one session per trial,
its hparams and metrics). tensorboardX supplies the protocol buffers, the
HParams plugin data and the TFRecord framing; it is imported only when a
file is written.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

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


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return v


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
        write_run(
            logdir / f"{r.index:03d}_{safe_name(r.role, 80)}",
            scalars,
            wall_time=wall_time,
            hparams=hparams,
            metrics={k: (step, v) for k, v in metrics.items() if v is not None},
        )


def write_trial_tables(run_dir: Path) -> dict[str, Path]:
    """trials.csv and tensorboard/ (HParams) of a finished run; {} when the
    run has no trials table."""
    run_dir = Path(run_dir)
    result: ResultJson = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    rows = []
    for i, row in enumerate(result.get("trials_table") or [], 1):
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
    if not rows:
        return {}
    with open(run_dir / "trials.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows([_cell(getattr(r, c)) for c in COLUMNS] for r in rows)
    write_hparams(run_dir / "tensorboard", rows, list(result.get("features") or []), time.time())
    return {"trials.csv": run_dir / "trials.csv", "tensorboard": run_dir / "tensorboard"}


# TensorBoard reads any file whose name holds "tfevents"; the usual name
# carries the host name and process id, which a bundle meant for a public
# tracker must not (one run per directory: one fixed name is enough).
EVENT_FILE = "events.out.tfevents.tfrepro"

HParams = Mapping[str, bool | int | float | str]


def write_run(
    logdir: Path,
    scalars: Mapping[str, Sequence[float | None]],
    *,
    wall_time: float | None = None,
    hparams: HParams | None = None,
    metrics: Mapping[str, tuple[int, float]] | None = None,
) -> Path:
    """One event file in `logdir` holding each series as scalars at steps
    1, 2, ...; None (a non-finite loss in result.json) is written as NaN,
    which TensorBoard shows at the step it happened. `hparams`: this run is
    one HParams session with those values; `metrics`: tag -> (step, value),
    the session's metrics (written as scalars, as the HParams plugin reads them)."""
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    from tensorboardX.proto.summary_pb2 import Summary
    from tensorboardX.record_writer import RecordWriter
    from tensorboardX.summary import hparams as hparams_summaries

    def scalar(tag: str, v: float) -> Summary:  # not summary.scalar: it warns on NaN, which we mean
        return Summary(value=[Summary.Value(tag=tag, simple_value=v)])

    logdir.mkdir(parents=True, exist_ok=True)
    t = time.time() if wall_time is None else wall_time
    path = logdir / EVENT_FILE
    writer = RecordWriter(str(path))
    try:
        writer.write(Event(wall_time=t, step=0, file_version="brain.Event:2").SerializeToString())

        def put(step: int, summary) -> None:
            writer.write(Event(wall_time=t, step=step, summary=summary).SerializeToString())

        if hparams is not None:
            # The session start only: TensorBoard infers the experiment
            # (hparam domains, metric names) from the sessions it finds.
            _, start, _ = hparams_summaries(dict(hparams), dict(metrics or {}))
            plugin = start.value[0].metadata.plugin_data
            data = HParamsPluginData.FromString(plugin.content)
            data.session_start_info.start_time_secs = t
            plugin.content = data.SerializeToString()
            put(0, start)
        for tag, series in scalars.items():
            for i, v in enumerate(series, 1):
                put(i, scalar(tag, math.nan if v is None else float(v)))
        for tag, (step, v) in (metrics or {}).items():
            put(step, scalar(tag, v))
    finally:
        writer.close()
    return path


def safe_name(name: str, limit: int) -> str:
    """`name` as a run directory's name: only letters, digits and `+-_.`, at most `limit` characters."""
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in name)[:limit]
