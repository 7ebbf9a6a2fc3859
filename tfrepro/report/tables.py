"""Trials where users look: `trials.csv` and a TensorBoard HParams view of a
run directory, written after every bisect (feature, commit or version mode).

    <run_dir>/trials.csv          one row per trial
    <run_dir>/tensorboard/<NNN>/  one HParams session per trial: the features
                                  as boolean hparams (commit/version: the label),
                                  the verdict; metrics shows_symptom, final_loss,
                                  median_step_ms; the loss and step time per step

`tensorboard --logdir <run_dir>/tensorboard` shows them (HParams tab). Read
from result.json's trials table and each trial's summary.json; each event
file (`write_run`, one per run directory) written with tensorboardX (no
TensorFlow), which supplies the protocol buffers, the HParams plugin data
and the TFRecord framing, imported only when a file is written.

The report bundle's measured artifacts (`write_events`, `plots`) are made
here too: one TensorBoard run per trial, loss and step-time plots. The
pictures (matplotlib, imported only when one is drawn, non-interactive)
read trial summaries as stored in result.json, read back as `TrialResult`s:
`losses` with NaN for a non-finite value, `step_times` in seconds,
`first_nonfinite_step`.

And a NaN's one-step replay (`write_replay`): a NaN hunt's bisect saves,
under its run dir, the state just before the step whose loss first went
non-finite and the batch of that step (`bisect/ends.py`,
`inside/harness_keras.py`). The report copies them into the bundle and
writes `replay.py`: it runs repro.py up to its `fit`, then, instead of
training, loads that state into the model and its optimizer, trains on that
one batch and prints the loss: NaN, in one step, with no data files and no
600 steps to wait for.
"""

from __future__ import annotations

import atexit
import csv
import importlib.util
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from tfrepro.report.answer import Report, timed
from tfrepro.report.records import ResultJson
from tfrepro.trials.values import TrialResult, TrialRow, read_json


def read_summary(run_dir: Path, row: TrialRow) -> TrialResult | None:
    """The trial's summary.json, or None (none recorded, or unreadable)."""
    doc = read_json(run_dir / row["summary"]) if row.get("summary") else None
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


def write_trial_tables(run_dir: Path) -> dict[str, Path]:
    """trials.csv and tensorboard/ (one HParams session per trial) of a
    finished run; {} when the run has no trials table."""
    run_dir = Path(run_dir)
    result: ResultJson = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = []
    features, wall_time = list(result.get("features") or []), time.time()  # one wall time for every session
    for i, row in enumerate(result.get("trials_table") or [], 1):
        s = read_summary(run_dir, row) or TrialResult()
        losses = s.losses  # a non-finite loss (null) reads back as NaN
        label = row.get("version") or row.get("sha") or s.label or ""  # a commit's sha or a release
        r = {  # one trial: the CSV's columns, in order
            "index": i,
            "role": row.get("role") or "",
            "repeat": row.get("repeat", 0),
            "label": "" if label == row.get("role") else label,
            "features_on": ";".join(row.get("enabled") or []),
            "verdict": row.get("verdict") or "",
            "steps": s.steps_run or len(losses),
            "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "first_nonfinite_step": s.first_nonfinite_step,
            "median_step_ms": _median_ms(s),
            "wall_s": s.wall_s,
            "cached": bool(row.get("cached")),
        }
        rows.append(r)
        metrics = {
            "shows_symptom": 0.0 if r["verdict"] in ("ok", "") else 1.0,
            "final_loss": math.nan if r["last_loss"] is None else r["last_loss"],
            "median_step_ms": r["median_step_ms"],
        }
        hparams: dict[str, bool | str] = {f: f in (row.get("enabled") or []) for f in features}
        if r["label"] and not features:  # a commit or version run: its label
            hparams["label"] = r["label"]
        hparams |= {"role": r["role"], "verdict": r["verdict"] or "unknown"}
        write_run(
            run_dir / "tensorboard" / f"{i:03d}_{safe_name(r['role'], 80)}",
            {"loss": s.losses, "step_time_ms": [1000.0 * t for t in s.step_times]},
            wall_time=wall_time,
            hparams=hparams,
            metrics={k: (max(1, r["steps"] or 0), v) for k, v in metrics.items() if v is not None},
        )
    if not rows:
        return {}
    with open(run_dir / "trials.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(rows[0])  # the column names
        w.writerows([_cell(v) for v in r.values()] for r in rows)
    return {"trials.csv": run_dir / "trials.csv", "tensorboard": run_dir / "tensorboard"}


# TensorBoard reads any file whose name holds "tfevents"; the usual name
# carries the host name and process id, which a bundle meant for a public
# tracker must not (one run per directory: one fixed name is enough).
EVENT_FILE = "events.out.tfevents.tfrepro"


def write_run(
    logdir: Path,
    scalars: Mapping[str, Sequence[float | None]],
    *,
    wall_time: float | None = None,
    hparams: Mapping[str, bool | int | float | str] | None = None,
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

    logdir.mkdir(parents=True, exist_ok=True)
    t = time.time() if wall_time is None else wall_time
    events = [Event(wall_time=t, step=0, file_version="brain.Event:2")]
    if hparams is not None:
        # The session start only: TensorBoard infers the experiment
        # (hparam domains, metric names) from the sessions it finds.
        _, start, _ = hparams_summaries(dict(hparams), dict(metrics or {}))
        plugin = start.value[0].metadata.plugin_data
        data = HParamsPluginData.FromString(plugin.content)
        data.session_start_info.start_time_secs = t
        plugin.content = data.SerializeToString()
        events.append(Event(wall_time=t, step=0, summary=start))
    points = [(i, tag, v) for tag, series in scalars.items() for i, v in enumerate(series, 1)]
    for step, tag, v in points + [(step, tag, v) for tag, (step, v) in (metrics or {}).items()]:
        # a scalar by hand, not summary.scalar: it warns on NaN, which we mean
        value = Summary.Value(tag=tag, simple_value=math.nan if v is None else float(v))
        events.append(Event(wall_time=t, step=step, summary=Summary(value=[value])))
    path = logdir / EVENT_FILE
    with closing(RecordWriter(str(path))) as writer:
        for event in events:
            writer.write(event.SerializeToString())
    return path


def safe_name(name: str, limit: int) -> str:
    """`name` as a run directory's name: only letters, digits and `+-_.`, at most `limit` characters."""
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in name)[:limit]


# --------------------------------------------------------------------------- the report bundle's artifacts


def write_events(logdir: Path, run_dir: Path, result: ResultJson) -> dict[str, str]:
    """One TensorBoard run per trial of the run, in order (tensorboard itself
    is not needed to write them: `write_run`); the baseline, failing and
    culprit summaries when the table has none."""
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


def plots(out: Path, r: Report, result: ResultJson) -> dict[str, str]:
    """The report's pictures (`result`: the run's, for the culprit configuration's name)."""
    notes = {"loss.png": "skipped: no per-step loss recorded"}
    symptom, base, cand = r.symptom, r.base, r.candidate
    label = "+".join(result.get("culprit_config") or result.get("culprits") or []) or "failing"
    curves = [("baseline (all features off)", base), (f"culprit configuration ({label})", cand)]
    if r.reference:  # a mismatch's re-run of reference.py
        curves.insert(1, ("reference (re-run of reference.py)", r.reference))
    if loss_plot(out / "loss.png", curves, title=f"per-step loss — {symptom}"):
        marked = ", first non-finite step marked" if symptom == "nan" else ""
        notes["loss.png"] = f"per-step loss, baseline against the culprit configuration{marked}"
    if symptom == "memory":
        notes["memory.png"] = "skipped: no memory series recorded"
        if memory_plot(out / "memory.png", curves[-2:], title="process memory per step — memory"):
            notes["memory.png"] = "resident memory after each step, baseline against the culprit configuration"
    if symptom == "slowdown":
        # Every steady step of one trial each shows the spread; the per-trial
        # medians of the interleaved timing runs are what the test compared.
        groups = [("baseline", list(base.steady_step_times())), (label, list(cand.steady_step_times()))]
        timing = timed(r.evidence)
        if not (groups[0][1] and groups[1][1]) and timing.baseline and timing.candidate:
            groups = [
                ("baseline (per-trial medians)", timing.baseline),
                (f"{label} (per-trial medians)", timing.candidate),
            ]
        notes["steps.png"] = "skipped: no step times recorded"
        if step_time_plot(out / "steps.png", groups, title="steady-state step time (warm-up excluded)"):
            notes["steps.png"] = "step-time distributions, baseline against the culprit configuration"
    return notes


@contextmanager
def _figure(path: Path, title: str, xlabel: str | None, ylabel: str):
    """A figure's axes to draw on; then labelled, titled, saved to `path` and
    closed. No `xlabel`: a box plot (a grid across only, no legend).
    matplotlib on the Agg backend, its config and font cache in a temp dir
    of ours: importing it must not create ~/.config/matplotlib (tfrepro
    writes nothing of the user's, its own processes included)."""
    if "MPLCONFIGDIR" not in os.environ:
        scratch = tempfile.mkdtemp(prefix="tfrepro-mpl-")
        atexit.register(shutil.rmtree, scratch, True)
        os.environ["MPLCONFIGDIR"] = scratch
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    try:
        yield ax
        ax.set(ylabel=ylabel, title=title)
        ax.grid(alpha=0.3, axis="y" if xlabel is None else "both")
        if xlabel is not None:
            ax.set_xlabel(xlabel)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def loss_plot(path: Path, curves: Sequence[tuple[str, TrialResult]], *, title: str) -> bool:
    """Per-step loss of each (label, summary); a non-finite step is drawn as a
    red vertical line and named in the legend. Returns False (and writes
    nothing) when no curve has a single loss."""
    if not any(s.losses for _, s in curves):
        return False
    with _figure(path, title, "step", "loss") as ax:
        finite_all: list[float] = []
        for label, s in curves:
            ys = [float(v) for v in s.losses]
            finite_all += [y for y in ys if math.isfinite(y)]
            ax.plot(range(1, len(ys) + 1), ys, marker="." if len(ys) < 60 else None, label=label)
            bad = s.first_nonfinite_step
            if bad is not None:
                ax.axvline(
                    bad, color="red", linestyle="--", linewidth=1.2, label=f"{label}: first non-finite loss, step {bad}"
                )
                # The loss there has no value to plot: mark the step at the top.
                tr = ax.get_xaxis_transform()
                ax.plot([bad], [0.95], marker="x", color="red", markersize=10, linestyle="none", transform=tr)
                ax.annotate(
                    "NaN/Inf",
                    (bad, 0.95),
                    xytext=(6, -4),
                    textcoords="offset points",
                    xycoords=tr,
                    color="red",
                    fontsize=8,
                )
            elif s.weights_finite is False:
                ax.plot([], [], " ", label=f"{label}: weights non-finite at the end")
        if finite_all and min(finite_all) > 0 and max(finite_all) / min(finite_all) > 100:
            ax.set_yscale("log")
    return True


def step_time_plot(path: Path, groups: Sequence[tuple[str, Sequence[float]]], *, title: str) -> bool:
    """Distributions of step time (seconds in, milliseconds drawn), one box
    per (label, samples). Returns False when a group is empty."""
    groups = [(label, [1000.0 * t for t in xs]) for label, xs in groups]
    if not groups or any(not xs for _, xs in groups):
        return False
    with _figure(path, title, None, "step time (ms)") as ax:
        labels = [f"{label}\nmedian {statistics.median(xs):.2f} ms (n={len(xs)})" for label, xs in groups]
        ax.boxplot([xs for _, xs in groups], showfliers=True)
        ax.set_xticks(range(1, len(groups) + 1), labels)
        for i, (_, xs) in enumerate(groups, start=1):
            jitter = [i + 0.08 * ((k % 7) - 3) / 3 for k in range(len(xs))]
            ax.plot(jitter, xs, ".", alpha=0.4, color="gray")
    return True


def memory_plot(path: Path, curves: Sequence[tuple[str, TrialResult]], *, title: str) -> bool:
    """Process RSS after each step (MB) of each (label, summary), with its
    growth slope in the legend. Returns False when no curve has a series."""
    if not any(s.rss_per_step for _, s in curves):
        return False
    with _figure(path, title, "step", "resident memory (MB)") as ax:
        for label, s in curves:
            ys = [v / 1e6 for v in s.rss_per_step]
            stride = int((s.extra.get("memory") or {}).get("stride") or 1)
            xs = [(i + 1) * stride for i in range(len(ys))]
            growth = s.growth_per_step
            tail = f" ({growth / 1e6:+.2f} MB/step)" if isinstance(growth, (int, float)) else ""
            ax.plot(xs, ys, marker="." if len(ys) < 60 else None, label=label + tail)
            if s.device_peak_bytes:
                ax.axhline(s.device_peak_bytes / 1e6, linestyle=":", linewidth=1, label=f"{label}: device peak")
    return True


# --------------------------------------------------------------------------- a NaN's one-step replay

REPLAY = "replay.py"
STATE_FILES = ("state.npz", "batch.npz", "state.json")

SCRIPT = '''"""Replay the step where the loss went NaN (written by tfrepro report).

Runs repro.py up to its first Model.fit; instead of training it loads the
model's and the optimizer's variables as they were just before step {step}
(nan_state/state.npz), trains on the batch of that step (nan_state/batch.npz)
and prints the loss. Exit 0 when the loss is NaN/Inf (the bug reproduces).

    python replay.py
"""

import json
import math
import os
import runpy
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, "nan_state")
META = json.load(open(os.path.join(STATE, "state.json"), encoding="utf-8"))


def _nest(leaves):
    """The structure of saved leaves keyed by their path below it ("" = the
    leaf itself; "a/0": a dict's "a", then a tuple's first item)."""
    if "" in leaves:
        return leaves[""]
    parts = {{}}
    for path, leaf in leaves.items():
        head, _, rest = path.partition("/")
        parts.setdefault(head, {{}})[rest] = leaf
    if all(k.isdigit() for k in parts):
        return tuple(_nest(parts[k]) for k in sorted(parts, key=int))
    return {{k: _nest(v) for k, v in parts.items()}}


def _batch():
    """(x, y, sample_weight) from the saved leaves ("0" = x, "0/name" = a dict
    input, "0/1" = a tuple's second input)."""
    saved = np.load(os.path.join(STATE, "batch.npz"))
    parts = {{}}
    for path in saved.files:
        head, _, rest = path.partition("/")
        parts.setdefault(head, {{}})[rest] = saved[path]
    return tuple(_nest(parts[str(i)]) if str(i) in parts else None for i in range(3))


def _variables(optimizer):
    found = getattr(optimizer, "variables", [])
    return list(found() if callable(found) else found)


def replay_fit(model, *args, **kwargs):
    x, y, sample_weight = _batch()
    state = np.load(os.path.join(STATE, "state.npz"))
    if len(model.weights) != len(META["weights"]):
        model(x)  # an unbuilt model: build it on the batch
    optimizer = model.optimizer
    if len(_variables(optimizer)) != len(META["optimizer"]) and hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)
    for i, v in enumerate(model.weights):
        v.assign(state[f"w{{i}}"])
    for i, v in enumerate(_variables(optimizer)[: len(META["optimizer"])]):
        v.assign(state[f"o{{i}}"])
    logs = model.train_on_batch(x, y, sample_weight=sample_weight, return_dict=True)
    loss = float(logs["loss"])
    print(f"replayed step {{META['step']}} from the saved state: loss = {{loss}}")
    sys.exit(0 if not math.isfinite(loss) else 1)


for name in ("keras", "tf_keras"):
    try:
        module = __import__(name)
        module.Model.fit = replay_fit
    except Exception:
        pass
sys.argv = [os.path.join(HERE, "repro.py")]
runpy.run_path(sys.argv[0], run_name="__main__")
print("repro.py ended without calling Model.fit: nothing was replayed")
sys.exit(1)
'''


def write_replay(out: Path, run_dir: Path, result: ResultJson) -> dict[str, str]:
    """replay.py and nan_state/ in the bundle `out` when the run saved a
    NaN state; returns the artifacts it wrote (name -> what it is)."""
    doc = result.get("nan_state") or {}
    src = run_dir / (doc.get("dir") or "")
    if not doc.get("dir") or not all((src / name).is_file() for name in STATE_FILES):
        return {}
    meta = json.loads((src / "state.json").read_text(encoding="utf-8"))
    dest = out / "nan_state"
    dest.mkdir(parents=True, exist_ok=True)
    for name in STATE_FILES:
        shutil.copyfile(src / name, dest / name)
    (out / REPLAY).write_text(SCRIPT.format(step=int(meta.get("step") or 0)), encoding="utf-8")
    shapes = [s for s, _dtype in (meta.get("batch") or {}).values()]
    records = shapes[0][0] if shapes and shapes[0] else "?"
    return {
        REPLAY: f"one-step replay: the state just before step {meta.get('step')} and that step's batch "
        "(nan_state/), one train step, the loss goes NaN (`python replay.py`)",
        "nan_state/": f"the model's and optimizer's variables before step {meta.get('step')} "
        f"({len(meta.get('weights') or [])} + {len(meta.get('optimizer') or [])}) and the batch of that step: "
        f"{records} records of the training data (`tfrepro report --no-data` leaves them out)",
    }
