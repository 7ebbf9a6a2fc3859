"""`tfrepro report` end to end, with real TensorFlow: a NaN, a slowdown and a
mismatch run of tiny planted projects, each reported once (module-scoped),
then the bundle checked the way a maintainer would use it: `python repro.py`
in a clean directory where tfrepro cannot be imported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report import SECRETS, check_issue_fields

from tfrepro.cli import main

pytestmark = pytest.mark.e2e

NAN_SRC = '''"""Regression on raw sensor readings with a hand-written normalisation layer."""
import keras
import numpy as np
from keras import ops

# tfrepro: feature mixed_precision -- mixed_float16 compute policy
# keras.mixed_precision.set_global_policy("mixed_float16")
# tfrepro: end
keras.utils.set_random_seed(0)


class CustomNorm(keras.layers.Layer):
    def call(self, x):
        mean = ops.mean(x, axis=-1, keepdims=True)
        var = ops.mean(ops.square(x), axis=-1, keepdims=True) - ops.square(mean)
        return (x - mean) * ops.rsqrt(var + 1e-3)


x = np.random.default_rng(0).uniform(200.0, 900.0, size=(96, 8)).astype("float32")
y = (x.mean(axis=1, keepdims=True) / 500.0).astype("float32")
# tfrepro: feature custom_norm -- hand-written layer normalisation
# norm = CustomNorm(name="custom_norm")
# tfrepro: else
norm = keras.layers.LayerNormalization(name="layer_norm")
# tfrepro: end
model = keras.Sequential([keras.Input((8,)), norm, keras.layers.Dense(4), keras.layers.Dense(1, dtype="float32")])
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=2)
'''

MISMATCH_SRC = '''"""Linear regression; the loss object is configured in one place."""
import keras
import numpy as np

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(96, 8)).astype("float32")
y = (x @ np.linspace(-1.0, 1.0, 8).reshape(8, 1)).astype("float32")

lr = 0.01
# tfrepro: feature lr_decay -- exponential learning-rate decay
# lr = keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=2, decay_rate=0.9)
# tfrepro: end
# tfrepro: feature sum_reduction -- sum the loss over the batch instead of averaging
# loss = keras.losses.MeanSquaredError(reduction="sum")
# tfrepro: else
loss = keras.losses.MeanSquaredError()
# tfrepro: end
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(lr), loss=loss)
model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=2)
'''

SLOW_SRC = '''"""A small classifier with a per-batch logging callback."""
import time

import keras
import numpy as np
import tensorflow as tf

STEPS = 8
keras.utils.set_random_seed(0)


class BatchLogger(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.04)  # stands for a synchronous write to a slow disk


x = np.random.default_rng(0).normal(size=(128, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
callbacks = []
# tfrepro: feature batch_logger -- log every batch
# callbacks.append(BatchLogger())
# tfrepro: end
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=2, steps_per_epoch=STEPS, callbacks=callbacks, verbose=2)
'''

PROJECTS = {
    "nan": (NAN_SRC, "[trial]\nsteps = 6\ntimeout_s = 120\n"),
    "mismatch": (MISMATCH_SRC, "[trial]\nsteps = 6\ntimeout_s = 120\n\n[features.lr_decay]\naffects_loss = true\n"),
    "slowdown": (SLOW_SRC, "[trial]\nsteps = 16\ntimeout_s = 120\n"),
}
EXPECTED_CULPRITS = {
    "nan": ["custom_norm", "mixed_precision"],
    "mismatch": ["sum_reduction"],
    "slowdown": ["batch_logger"],
}

# Runs `repro.py` as `python repro.py` would, with tfrepro made unimportable.
NO_TFREPRO = (
    "import runpy, sys; sys.modules['tfrepro'] = None; sys.argv = [sys.argv[1]]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _make_project(root: Path, symptom: str) -> Path:
    src, manifest = PROJECTS[symptom]
    root.mkdir(parents=True)
    (root / "repro.py").write_text(src)
    (root / "tfrepro.toml").write_text(manifest)
    return root


def _bisect(project: Path) -> Path:
    """The real bisect engine on the project, one replay instead of three to
    keep this module's cost down (the replay rule has its own tests). The
    slowdown project has one feature: each timing comparison costs at least
    two trials (the candidate, then a baseline), more when it is not clear-cut."""
    from tfrepro.bisect.engine import BisectOptions, bisect
    from tfrepro.project import Project

    # A 40x slowdown is clear-cut (one pair, two on a loaded machine); a
    # budget of 4 pairs per comparison is ample.
    result = bisect(Project.load(project), BisectOptions(replays=1, timing_max=4))
    assert result.status == "found", result.error
    return Path(result.run_dir).resolve()


def _report(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    # Secrets in the environment of the report and of every child it starts.
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    r = CliRunner().invoke(main, ["report", str(run_dir), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "re-running repro.py in a fresh process" in r.stderr  # progress while it re-runs
    return json.loads(r.stdout)


@pytest.fixture(scope="module", params=["nan", "slowdown", "mismatch"])
def reported(request, tmp_path_factory):
    symptom = request.param
    project = _make_project(tmp_path_factory.mktemp(f"report-{symptom}") / "proj", symptom)
    run_dir = _bisect(project)
    with pytest.MonkeyPatch.context() as mp:
        doc = _report(run_dir, mp)
    return symptom, doc, Path(doc["bundle"])


def _run_clean(bundle: Path, script: str, tmp: Path) -> subprocess.CompletedProcess:
    clean = tmp / "clean"
    clean.mkdir(exist_ok=True)
    shutil.copy(bundle / script, clean / script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return subprocess.run(
        [sys.executable, "-c", NO_TFREPRO, script],
        cwd=clean,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _runs(script: Path, statement: str) -> bool:
    """True when `statement` is code (not a comment) of `script`."""
    import ast

    return any(
        isinstance(node, ast.stmt) and ast.unparse(node) == statement
        for node in ast.walk(ast.parse(script.read_text()))
    )


def _keras_losses(output: str) -> list[float]:
    """Keras's own `loss: X` lines (the bundle's last line, tfrepro's footer, is not one)."""
    keras_lines = "\n".join(ln for ln in output.splitlines() if not ln.startswith("(tfrepro)"))
    return [float(x) for x in re.findall(r"loss: (\S+)", keras_lines)]


def test_bundle_holds_everything_the_issue_form_asks(reported):
    symptom, doc, bundle = reported
    assert doc["symptom"] == symptom and doc["culprits"] == EXPECTED_CULPRITS[symptom]
    for name in ("repro.py", "reference.py", "ISSUE.md", "report.json", "result.json", "loss.png"):
        assert (bundle / name).is_file(), name
    assert (bundle / "steps.png").is_file() == (symptom == "slowdown")
    issue = (bundle / "ISSUE.md").read_text()
    check_issue_fields(issue)
    # Real values, not placeholders: versions from the child TensorFlow.
    import importlib.metadata as md

    assert md.version("tensorflow") in issue and md.version("keras") in issue
    assert "reproduced yes" in issue, doc["reproduction"]
    assert "it needs only TensorFlow and NumPy." in issue
    assert "tfrepro:" not in (bundle / "repro.py").read_text()
    # The training setup as the re-run's trial recorded it (its own fields: one record).
    setup = json.loads((bundle / "report.json").read_text())["setup"]
    assert setup["replicas"] == "1 (observed at run time)", setup
    assert setup["precision_policy"].startswith("mixed_float16" if symptom == "nan" else "float32"), setup


def test_repro_reproduces_in_a_clean_directory_without_tfrepro(reported, tmp_path):
    symptom, _doc, bundle = reported
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_TFREPRO.replace("runpy.run_path(sys.argv[0], run_name='__main__')", "import tfrepro"),
            "x",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr  # the guard works
    got = _run_clean(bundle, "repro.py", tmp_path)
    if symptom == "nan":
        assert re.search(r"loss: nan", got.stdout, re.IGNORECASE), got.stdout[-2000:] + got.stderr[-2000:]
        assert got.stdout.splitlines()[-1].startswith("(tfrepro) symptom seen: NaN/Inf in the "), got.stdout[-2000:]
        return
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.splitlines()[-1].startswith("(tfrepro) ran to its end ("), got.stdout[-2000:]
    ref = _run_clean(bundle, "reference.py", tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    if symptom == "mismatch":
        a, b = _keras_losses(got.stdout)[-1], _keras_losses(ref.stdout)[-1]
        assert abs(a - b) / abs(b) > 0.05, (a, b)
    else:  # the pair differs by the culprit: on in repro.py, off in reference.py (its speed: benchmarks/)
        assert _runs(bundle / "repro.py", "callbacks.append(BatchLogger())")
        assert not _runs(bundle / "reference.py", "callbacks.append(BatchLogger())")
        assert len(_keras_losses(got.stdout)) == len(_keras_losses(ref.stdout)) == 2  # both trained both epochs


def test_no_secret_reaches_the_bundle(reported):
    _, _, bundle = reported
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert any(p.suffix == ".png" for p in files)
    for p in files:
        data = p.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in data, f"{name} leaked into {p.relative_to(bundle)}"
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        texts = [p.read_text() for p in files if p.suffix in (".md", ".json", ".py")]
        assert not any(home + "/" in t for t in texts)


def test_nan_localisation_names_op_and_layer(reported):
    symptom, doc, bundle = reported
    if symptom != "nan":
        pytest.skip("localisation is for NaN runs")
    loc = doc["localization"]
    assert loc["found"], loc
    assert loc["op_type"] == "Square" and loc["layer"] == "custom_norm" and loc["layer_class"] == "CustomNorm"
    src = (bundle / "repro.py").read_text().splitlines()
    assert "ops.square(x)" in src[loc["line"] - 1] and loc["function"] == "CustomNorm.call"
    issue = (bundle / "ISSUE.md").read_text()
    assert "produced by op `Square` in layer `custom_norm` (CustomNorm) at repro.py:" in issue


def test_event_files_hold_every_trial(reported):
    _symptom, doc, bundle = reported
    runs = [d for d in (bundle / "tensorboard").iterdir() if d.is_dir()]
    table = doc["evidence"]["trials_table"] or []
    assert len(runs) == (len(table) if table else 3) and len(runs) >= 2
    assert all(any(f.name.startswith("events.out.tfevents") for f in d.iterdir()) for d in runs)
