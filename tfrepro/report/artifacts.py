"""The bundle's measured artifacts: one TensorBoard run per trial, loss and
step-time plots."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tfrepro.report.answer import Reproduction, of
from tfrepro.report.records import ResultJson
from tfrepro.report.tables import read_summary, safe_name, write_run
from tfrepro.trials.slowdown import TimingRecord
from tfrepro.trials.values import TrialResult


def write_events(logdir: Path, run_dir: Path, result: ResultJson) -> dict[str, str]:
    """One TensorBoard run per trial of the run, in order (written with
    tensorboardX: neither TensorFlow nor tensorboard is needed to write
    them); the baseline, failing and culprit summaries when the table has none."""
    trials = []
    for i, row in enumerate(result.get("trials_table") or [], 1):
        summary = read_summary(run_dir, row)
        if summary is None:
            continue
        label = "+".join(row.get("enabled") or []) or "baseline"
        role = f"_{row['role']}{row.get('repeat', '')}" if row.get("role") else ""
        trials.append((f"{i:02d}_{label}{role}_{row.get('verdict', '')}"[:120], summary))
    trials = trials or [
        (key, TrialResult.from_dict(result[key])) for key in ("baseline", "failing", "culprit_trial") if result.get(key)
    ]
    if not trials:
        return {"tensorboard/": "skipped: the run kept no per-trial summaries"}
    for name, s in trials:
        ms, mb = [1000.0 * t for t in s.step_times], [v / 1e6 for v in s.rss_per_step]
        write_run(logdir / safe_name(name, 120), {"loss": s.losses, "step_time_ms": ms, "rss_mb": mb})
    view = (
        "view them with `tensorboard --logdir tensorboard`"
        if have_tensorboard()
        else "viewing skipped: tensorboard not installed here (`pip install tensorboard`, "
        "then `tensorboard --logdir tensorboard`)"
    )
    return {"tensorboard/": f"{len(trials)} runs, one per trial (scalars loss, step_time_ms, rss_mb); {view}"}


def have_tensorboard() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def plots(out: Path, result: ResultJson, symptom: str, rep: Reproduction | None) -> dict[str, str]:
    from tfrepro.report import plots as draw

    notes = {"loss.png": "skipped: no per-step loss recorded"}
    base = TrialResult.from_dict(result.get("baseline") or {})
    cand = TrialResult.from_dict(result.get("culprit_trial") or result.get("failing") or {})
    label = "+".join(result.get("culprit_config") or result.get("culprits") or []) or "failing"
    curves = [("baseline (all features off)", base), (f"culprit configuration ({label})", cand)]
    if symptom == "mismatch" and rep and rep.reference:
        curves.insert(1, ("reference (re-run of reference.py)", TrialResult.from_dict(rep.reference)))
    if draw.loss_plot(out / "loss.png", curves, title=f"per-step loss — {symptom}"):
        marked = ", first non-finite step marked" if symptom == "nan" else ""
        notes["loss.png"] = f"per-step loss, baseline against the culprit configuration{marked}"
    if symptom == "memory":
        notes["memory.png"] = "skipped: no memory series recorded"
        if draw.memory_plot(out / "memory.png", curves[-2:], title="process memory per step — memory"):
            notes["memory.png"] = "resident memory after each step, baseline against the culprit configuration"
    if symptom == "slowdown":
        # Every steady step of one trial each shows the spread; the per-trial
        # medians of the interleaved timing runs are what the test compared.
        groups = [("baseline", list(base.steady_step_times())), (label, list(cand.steady_step_times()))]
        timing = of(TimingRecord, result.get("timing")) or TimingRecord()
        if not (groups[0][1] and groups[1][1]) and timing.baseline and timing.candidate:
            groups = [
                ("baseline (per-trial medians)", timing.baseline),
                (f"{label} (per-trial medians)", timing.candidate),
            ]
        notes["steps.png"] = "skipped: no step times recorded"
        if draw.step_time_plot(out / "steps.png", groups, title="steady-state step time (warm-up excluded)"):
            notes["steps.png"] = "step-time distributions, baseline against the culprit configuration"
    return notes
