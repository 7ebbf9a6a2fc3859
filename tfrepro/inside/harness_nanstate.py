"""The state before a NaN step, inside the trial process (loaded by path by
harness_keras.py when the config has `save_state_step` > 0; no tfrepro import).

A NaN hunt's "nan-state" trial reruns the failing configuration, seeded and
deterministic, and at step N (the step whose loss was the first non-finite
one) saves under `state_dir`:

- state.npz: every variable of the model (`w0`, `w1`, ... in `model.weights`
  order) and of its optimizer (`o0`, ..., its iteration count and slots), as
  they were when step N began: the last finite state;
- batch.npz: the batch step N trained on, one array per leaf of the data
  structure `train_step` got, named by its path (harness_data.batch_outputs:
  `0` = x, `1` = y, `2` = sample weights; `0/name` for a dict input);
- state.json: the step, the variable names and the batch's paths.

`tfrepro report` writes replay.py beside repro.py from them: load the state,
run that batch, see the NaN (Keras's `train_on_batch`).
"""

from __future__ import annotations

import json
import os


class StateSaver:
    def __init__(self, config: dict) -> None:
        self.step = int(config.get("save_state_step") or 0)
        self.dir = config.get("state_dir") or ""
        self.meta: dict = {"step": self.step}

    def wanted(self, steps_seen: int) -> bool:
        """Is the step about to run (steps_seen + 1) the one to save?"""
        return bool(self.dir) and steps_seen + 1 == self.step

    def save_state(self, model) -> None:
        import numpy as np

        os.makedirs(self.dir, exist_ok=True)
        variables = getattr(getattr(model, "optimizer", None), "variables", None)
        if callable(variables):
            variables = variables()
        arrays, names = {}, {}
        for prefix, key, group in (("w", "weights", model.weights), ("o", "optimizer", variables or [])):
            arrays.update({f"{prefix}{i}": np.asarray(v.numpy()) for i, v in enumerate(group)})
            names[key] = [getattr(v, "path", None) or v.name for v in group]
        np.savez(os.path.join(self.dir, "state.npz"), **arrays)
        self.meta.update(names)
        self._write_meta()

    def save_batch(self, batch: dict) -> None:
        import numpy as np

        os.makedirs(self.dir, exist_ok=True)
        arrays = {path: np.asarray(t) for path, t in batch.items()}
        np.savez(os.path.join(self.dir, "batch.npz"), **arrays)
        self.meta["batch"] = {p: [list(a.shape), str(a.dtype)] for p, a in arrays.items()}
        self._write_meta()

    def _write_meta(self) -> None:
        with open(os.path.join(self.dir, "state.json"), "w", encoding="utf-8") as f:
            json.dump(self.meta, f, indent=1)
