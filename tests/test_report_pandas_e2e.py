"""Issue 27 with pandas: a script that reads its training data with
`pandas.read_csv` and goes NaN because of records in it. The harness records
the read (file:line, the DataFrame's columns), the bisect finds the culprit,
and the report's bundle, copied alone into an empty directory, runs with
`python repro.py`, shows the NaN and holds no data file whole."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]

TRAIN = """\
import keras
import numpy as np
import pandas as pd

keras.utils.set_random_seed(0)
table = pd.read_csv("data/customers.csv")
features = table[["age", "income", "tenure"]].to_numpy("float32")
features[:, 1] = features[:, 1] / 1e5
# tfrepro: feature log_income -- model log(income) instead of income
# features[:, 1] = np.log(table["income"].to_numpy("float32")) - 10.0
# tfrepro: end
features[:, 0] = (features[:, 0] - 50) / 20
target = ((table["spend"].to_numpy("float32") - 250) / 150)[:, None]
model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
model.fit(features, target, batch_size=16, epochs=1, shuffle=False, verbose=0)
"""


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "tfrepro", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_a_pandas_read_csv_nan_is_found_and_its_bundle_runs_alone(tmp_path):
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    rng = np.random.default_rng(0) if (np := __import__("numpy")) else None
    n = 320
    income = rng.uniform(2e4, 1.5e5, n).round()
    income[-40:] = 0.0  # sorted by age: the oldest report no income; log(0) = -inf
    frame = pd.DataFrame({"age": np.sort(rng.integers(18, 90, n)), "income": income, "tenure": rng.integers(0, 30, n)})
    frame["spend"] = (frame["income"] / 400 + rng.normal(0, 20, n)).round(2)
    frame.to_csv(root / "data" / "customers.csv", index=False)
    (root / "train.py").write_text(TRAIN)
    (root / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\nsteps = 30\n')
    bisect = _cli(root, "bisect", "--json")
    assert bisect.returncode == 0, bisect.stderr[-3000:]
    doc = json.loads(bisect.stdout)
    assert (doc["status"], doc["symptom"], doc["culprits"]) == ("found", "nan", ["log_income"])
    reads = doc["failing"]["data"]["sources"]
    assert any(s.get("call") == "pandas.read_csv" and "train.py:6" in str(s.get("at")) for s in reads), reads
    report = _cli(root, "report", "--json")
    assert report.returncode == 0, report.stderr[-3000:]
    bundle = Path(json.loads(report.stdout)["bundle"])
    alone = tmp_path / "alone"
    shutil.copytree(bundle, alone)
    csv = (root / "data" / "customers.csv").read_bytes()
    assert not any(p.is_file() and p.read_bytes() == csv for p in alone.rglob("*")), "the data file went whole"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([sys.executable, "repro.py"], cwd=alone, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "symptom seen" in ran.stdout.splitlines()[-1], ran.stdout[-2000:]
