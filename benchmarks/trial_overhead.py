"""Trial overhead: wall time of `tfrepro run` against a bare `python` run of the
same variant with the same step count (target: ratio <= 1.15 on CPU).

Both sides are fresh processes started from here, interleaved (bare, tfrepro,
bare, ...) so machine drift hits both; the figure is the ratio of medians.
The CPU time of each process tree is printed too: on a busy machine it is
the steadier figure. The tfrepro side is the whole command (`python -m tfrepro run --no-cache`):
CLI start-up, project load, variant rendering, harness and result. A ratio,
never a timed assertion.

    .venv/bin/python benchmarks/trial_overhead.py [--steps 50] [--repeats 3] [--mode fit|loop|both]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """\
import numpy as np
import tensorflow as tf
import keras

STEPS, BATCH, MODE = {steps}, 32, "{mode}"
rng = np.random.default_rng(0)
x = rng.normal(size=(STEPS * BATCH, 32)).astype("float32")
y = (x @ rng.normal(size=(32, 1)).astype("float32")).astype("float32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
if MODE == "fit":
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
else:
    optimizer, loss_fn = keras.optimizers.Adam(), keras.losses.MeanSquaredError()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(STEPS):
        sl = slice(step * BATCH, (step + 1) * BATCH)
        print(f"step={{step + 1}} loss={{float(train_step(x[sl], y[sl]))!r}}")
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process tree) of one run; stdout to `log`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=err, check=True)
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(mode: str, steps: int, repeats: int, work: Path) -> dict[str, float]:
    project = work / f"project_{mode}"
    project.mkdir()
    (project / "repro.py").write_text(SCRIPT.format(steps=steps, mode=mode))
    # The harness ends a trial with os._exit at the step cap, skipping the
    # interpreter's teardown; this twin does the same, so tfrepro / fast-exit
    # isolates the cost of the CLI, the variant copy and the measuring.
    (project / "repro_fast_exit.py").write_text(
        SCRIPT.format(steps=steps, mode=mode) + "\nimport os, sys\nsys.stdout.flush()\nos._exit(0)\n"
    )
    (project / "tfrepro.toml").write_text(f"[trial]\nsteps = {steps}\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    repo = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(repo)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    bare_cmd = [sys.executable, "repro.py"]
    fast_cmd = [sys.executable, "repro_fast_exit.py"]
    tool_cmd = [sys.executable, "-m", "tfrepro", "run", str(project), "--steps", str(steps), "--no-cache", "--json"]
    # one untimed run each: file-system caches, __pycache__
    timed(bare_cmd, project, env, work / "warm_bare.log")
    timed(tool_cmd, work, env, work / "warm_tool.log")
    timed(fast_cmd, project, env, work / "warm_fast.log")
    bare, tool, fast = [], [], []
    for i in range(repeats):
        bare.append(timed(bare_cmd, project, env, work / f"bare{i}.log"))
        tool.append(timed(tool_cmd, work, env, work / f"tool{i}.log"))
        fast.append(timed(fast_cmd, project, env, work / f"fast{i}.log"))
    result = json.loads((work / f"tool{repeats - 1}.log").read_text())
    assert result["steps_run"] == steps and not result["crashed"], result
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    return {
        "bare_s": med(bare, 0),
        "tfrepro_s": med(tool, 0),
        "ratio": med(tool, 0) / med(bare, 0),
        "cpu_ratio": med(tool, 1) / med(bare, 1),
        "fast_s": med(fast, 0),
        "fast_ratio": med(tool, 0) / med(fast, 0),
        "fast_cpu_ratio": med(tool, 1) / med(fast, 1),
        # load only ever adds time: the fastest runs are the least disturbed
        "min_ratio": min(x[0] for x in tool) / min(x[0] for x in bare),
        "min_fast_ratio": min(x[0] for x in tool) / min(x[0] for x in fast),
        "bare_all": [x[0] for x in bare],
        "tfrepro_all": [x[0] for x in tool],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mode", choices=["fit", "loop", "both"], default="both")
    args = ap.parse_args()
    modes = ["fit", "loop"] if args.mode == "both" else [args.mode]
    with tempfile.TemporaryDirectory(prefix="tfrepro-bench-") as tmp:
        for mode in modes:
            work = Path(tmp) / mode
            work.mkdir()
            m = measure(mode, args.steps, args.repeats, work)
            print(
                f"{mode:<4}  steps={args.steps}  bare python {m['bare_s']:.2f} s  "
                f"tfrepro run {m['tfrepro_s']:.2f} s  ratio {m['ratio']:.3f}  CPU-time ratio {m['cpu_ratio']:.3f}  "
                f"(bare {', '.join(f'{x:.2f}' for x in m['bare_all'])}; "
                f"tfrepro {', '.join(f'{x:.2f}' for x in m['tfrepro_all'])})"
            )
            print(
                f"      vs bare python ending with os._exit like the harness ({m['fast_s']:.2f} s): "
                f"ratio {m['fast_ratio']:.3f}, CPU-time ratio {m['fast_cpu_ratio']:.3f}"
            )
            print(f"      fastest runs: ratio {m['min_ratio']:.3f}, vs the os._exit twin {m['min_fast_ratio']:.3f}")


if __name__ == "__main__":
    main()
