"""replay.py (report/tables.py `write_replay`): the saved batch goes back to `fit` in the
structure training gave it, without TensorFlow (a stand-in `keras` module
beside the script)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tfrepro.report.tables import write_replay

FAKE_KERAS = """
class Model:
    weights = []
    optimizer = type("Opt", (), {"variables": []})()

    def fit(self, *args, **kwargs):
        raise AssertionError("replay.py did not replace fit")

    def train_on_batch(self, x, y, sample_weight=None, return_dict=False):
        def shape(v):
            if isinstance(v, dict):
                return {k: shape(x) for k, x in sorted(v.items())}
            if isinstance(v, (list, tuple)):
                return [shape(x) for x in v]
            return None if v is None else list(v.shape)
        print("BATCH", repr([shape(x), shape(y), shape(sample_weight)]))
        return {"loss": float("nan")}
"""


def _replayed(tmp_path, batch: dict) -> str:
    run, out = tmp_path / "run", tmp_path / "bundle"
    state = run / "nan_state"
    state.mkdir(parents=True)
    out.mkdir()
    np.savez(state / "batch.npz", **batch)
    np.savez(state / "state.npz")
    (state / "state.json").write_text(json.dumps({"step": 3, "weights": [], "optimizer": [], "batch": {}}))
    assert write_replay(out, run, {"nan_state": {"dir": "nan_state"}})
    (out / "keras.py").write_text(FAKE_KERAS)
    (out / "repro.py").write_text("import keras\nkeras.Model().fit()\n")
    got = subprocess.run([sys.executable, "replay.py"], cwd=out, capture_output=True, text=True)
    assert got.returncode == 0, got.stdout + got.stderr
    return next(line for line in got.stdout.splitlines() if line.startswith("BATCH"))


def test_a_tuple_of_inputs_is_replayed_as_a_tuple_and_a_dict_as_a_dict(tmp_path):
    """A two-input model's x was saved as 0/0, 0/1 (harness_data.batch_outputs):
    it goes back as two inputs, not as a dict keyed "0", "1" (before)."""
    two = {"0/0": np.zeros((4, 2)), "0/1": np.zeros((4, 3)), "1": np.zeros((4,))}
    assert _replayed(tmp_path / "t", two) == "BATCH [[[4, 2], [4, 3]], [4], None]"
    named = {"0/a": np.zeros((4, 2)), "0/b/0": np.zeros((4, 1)), "1": np.zeros((4,)), "2": np.ones((4,))}
    assert _replayed(tmp_path / "d", named) == "BATCH [{'a': [4, 2], 'b': [[4, 1]]}, [4], [4]]"
