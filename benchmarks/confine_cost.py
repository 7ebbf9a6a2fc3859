"""The cost of confinement per warm (and cold) trial, side by side in one run.

The same tiny trial through the real runner (`run_variant`), interleaved:
unconfined (TFREPRO_CONFINE=none, --unconfined), overlay (the warm child sets
up its namespaces and overlays after the fork; a cold trial runs under
bubblewrap) and Landlock, `--pairs` rounds of each. Per trial: wall from
asking for the trial to its result. The figure that matters is the median
difference to the unconfined trial of the same round (the fixed cost the
mechanism adds); the load average is printed with it (a shared machine is
noisy: read the per-round differences, not one wall time).

    PYTHONPATH=. .venv/bin/python benchmarks/confine_cost.py [--pairs 7] [--tf] [--cold]

Without `--tf` the trial is a plain Python script forked from a server that
preloads nothing (what confinement adds, without TensorFlow's noise); with
`--tf` a 4-step Keras fit forked from the TensorFlow server.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tfrepro.settings import TrialSettings
from tfrepro.trials import confine, warm
from tfrepro.trials.runner import TrialOptions, run_variant

PLAIN = "print('step=1 loss=1.0')\n"
TF = """\
import numpy as np
import tensorflow as tf
from tensorflow import keras
x = np.random.rand(32, 4).astype("float32"); y = np.random.rand(32, 1).astype("float32")
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
m.fit(x, y, batch_size=8, epochs=1, verbose=0)
"""
MODES = ("none", "overlay", "landlock")


def one(script: str, mode: str, pool: warm.WarmPool, cold: bool, root: Path, i: int) -> tuple[float, str]:
    os.environ[confine.ENV] = mode
    trial = root / f"{mode}-{i}"
    (trial / "variant").mkdir(parents=True)
    (trial / "variant" / "s.py").write_text(script)
    start = time.perf_counter()
    r = run_variant(
        trial / "variant",
        TrialSettings(entry="s.py", steps=4, timeout_s=120),
        trial,
        TrialOptions(cold=cold),
        warm_pool=pool,
    )
    wall = time.perf_counter() - start
    if r.crashed:
        raise SystemExit(f"{mode}: {r.error}")
    return wall, r.extra.get("process", "?")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--tf", action="store_true")
    ap.add_argument("--cold", action="store_true")
    args = ap.parse_args()
    confine.UNCONFINED = True
    for mode in MODES:  # detection once per mode, outside the timings
        os.environ[confine.ENV] = mode
        print(f"{mode}: {confine.detect().describe()}")
    # one server per mode (TFREPRO_CONFINE is in the server key): all three stay alive
    pool = warm.WarmPool(max_servers=3) if args.tf else warm.WarmPool(preload=(), only_tf_scripts=False, max_servers=3)
    script = TF if args.tf else PLAIN
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="tfrepro-confine-bench-") as tmp:
        for mode in MODES:  # each server's start, left out
            one(script, mode, pool, args.cold, Path(tmp), -1 - MODES.index(mode))
        for i in range(args.pairs):
            for mode in MODES:
                wall, how = one(script, mode, pool, args.cold, Path(tmp), i)
                walls[mode].append(wall)
    pool.close()
    print(f"load average {os.getloadavg()}, {args.pairs} rounds, {'cold' if args.cold else how} trials")
    for mode in MODES:
        diffs = [w - n for w, n in zip(walls[mode], walls["none"], strict=True)]
        print(
            f"{mode:9s} median wall {statistics.median(walls[mode]):.3f} s, "
            f"median extra vs unconfined {statistics.median(diffs):+.3f} s "
            f"(per round: {' '.join(f'{d:+.3f}' for d in diffs)})"
        )


if __name__ == "__main__":
    sys.exit(main())
