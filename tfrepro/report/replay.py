"""The one-step replay of a NaN: `replay.py` and `nan_state/` beside repro.py.

A NaN hunt's bisect saves, under its run dir, the state just before the step
whose loss first went non-finite and the batch of that step
(`bisect/ends.py`, `inside/harness_keras.py`). The report copies them into
the bundle and writes `replay.py`: it runs repro.py up to its `fit`, then,
instead of training, loads that state into the model and its optimizer,
trains on that one batch and prints the loss: NaN, in one step, with no
data files and no 600 steps to wait for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tfrepro.report.records import ResultJson

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
