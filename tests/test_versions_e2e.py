"""Version mode on real TensorFlow releases, each in its own environment.

Guarded: installing several TensorFlow releases is for a benchmark, not CI.
A test runs when TFREPRO_VERSION_E2E=1 is set (it then builds what is
missing in the user cache, ~1.2 GB per release) or when every environment it
needs is already in that cache (then it costs only its trials). The suite
gives every session a fresh, empty cache (tests/conftest.py): these tests
see the real one only with TFREPRO_TEST_USER_CACHE=1 (they are marked
`user_cache`).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tfrepro.bisect import versions as vmode
from tfrepro.bisect.events import BisectOptions
from tfrepro.trials.envs import EnvStore, spec_for

DIST = "tensorflow-cpu"
pytestmark = pytest.mark.user_cache


def needs_envs(*versions: str) -> pytest.MarkDecorator:
    store = EnvStore()
    cached = all(store.ready(spec_for(v, tf_dist=DIST)) for v in versions)
    return pytest.mark.skipif(
        not (os.environ.get("TFREPRO_VERSION_E2E") == "1" or cached),
        reason=f"needs {DIST} {', '.join(versions)} environments: set TFREPRO_VERSION_E2E=1 to build them "
        "(and TFREPRO_TEST_USER_CACHE=1 to use the real user cache)",
    )


def write(root: Path, source: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "repro.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return root


FIT = """\
    import numpy as np
    import tensorflow as tf

    x = np.random.rand(256, 8).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 4).astype("float32")
    {plant}
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer={optimizer}, loss="binary_crossentropy")
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)
"""


def bisect_versions(*args, **kwargs) -> dict:
    return vmode.bisect_versions(*args, **kwargs).to_dict()


@pytest.mark.e2e
@needs_envs("2.20.0", "2.21.0")
def test_planted_version_dependent_nan_is_found(tmp_path):
    # planted: only the newer release gets a NaN in its data
    # a NaN target, not input: a fused MatMul+BiasAdd+ReLU may turn a NaN input into 0 on some CPUs
    plant = "y[0, 0] = np.nan if tuple(map(int, tf.__version__.split('.')[:2])) >= (2, 21) else y[0, 0]"
    root = write(tmp_path / "p", FIT.format(plant=plant, optimizer='"adam"'))
    r = bisect_versions(root, ["2.20.0", "2.21.0"], BisectOptions(steps=10), vmode.Releases(tf_dist=DIST))
    assert r["status"] == "found", r.get("message")
    assert (r["symptom"], r["last_good_version"], r["first_bad_version"]) == ("nan", "2.20.0", "2.21.0")
    assert r["follows"] == "tensorflow"  # Keras 3 on both sides


@pytest.mark.e2e
@needs_envs("2.14.1", "2.15.1", "2.16.2", "2.17.1")
def test_legacy_optimizer_crashes_from_keras3(tmp_path):
    root = write(tmp_path / "p", FIT.format(plant="", optimizer="tf.keras.optimizers.legacy.Adam(1e-3)"))
    r = bisect_versions(
        root, ["2.14.1", "2.15.1", "2.16.2", "2.17.1"], BisectOptions(steps=10), vmode.Releases(tf_dist=DIST)
    )
    assert r["status"] == "found", r.get("message")
    assert (r["symptom"], r["last_good_version"], r["first_bad_version"]) == ("crash", "2.15.1", "2.16.2")
    assert r["follows"] == "keras"
    rows = {row["version"]: row for row in r["versions"]}
    assert rows["2.15.1"]["keras"].startswith("2.") and rows["2.16.2"]["keras"].startswith("3.")
    # Each trial is keyed and labelled by its own environment's versions.
    assert r["baseline"]["tf_version"] == "2.14.1"
    again = bisect_versions(
        root, ["2.14.1", "2.15.1", "2.16.2", "2.17.1"], BisectOptions(steps=10), vmode.Releases(tf_dist=DIST)
    )
    assert again["cached_trials"] == again["trials"] == r["trials"]


MARKED = """\
    import numpy as np
    import tensorflow as tf

    x = np.random.rand(256, 8).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 4).astype("float32")
    # tfrepro: feature legacy_optimizer -- the pre-Keras-3 optimizer
    optimizer = tf.keras.optimizers.legacy.Adam(1e-3)
    # tfrepro: else
    # optimizer = tf.keras.optimizers.Adam(1e-3)
    # tfrepro: end
    # tfrepro: feature wide -- a wider hidden layer
    units = 32
    # tfrepro: else
    # units = 16
    # tfrepro: end
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(units, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=optimizer, loss="binary_crossentropy")
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)
"""


@pytest.mark.e2e
@needs_envs("2.15.1", "2.16.2")
def test_then_features_names_the_feature_that_breaks_in_the_first_bad_release(tmp_path):
    """ "2.16.2 broke it, and only with legacy_optimizer on": the version bisect,
    then a feature bisect inside the first bad release's environment (CLI)."""
    import json
    import subprocess
    import sys

    root = write(tmp_path / "p", MARKED)
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 10\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfrepro",
            "bisect",
            str(root),
            "--tf-versions",
            "2.15.1,2.16.2",
            "--tf-dist",
            DIST,
            "--then-features",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, doc
    assert (doc["last_good_version"], doc["first_bad_version"], doc["symptom"]) == ("2.15.1", "2.16.2", "crash")
    assert doc["then_features"]["status"] == "found", doc["then_features"]
    assert doc["then_features"]["culprits"] == ["legacy_optimizer"]
