"""`tfrepro report` after the README's loop (milliseconds, no TensorFlow):
it loads the script the run recorded (`tfrepro bisect train.py` with no
tfrepro.toml), and a commit-mode run's own shas are not secrets while any
other 40-hex value still is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tfrepro.report.bundle import load_context
from tfrepro.report.secretscan import HEX_KIND, run_commits, scan_bundle
from tfrepro.settings import TrialSettings

SCRIPT = """\
import keras
import numpy as np

x = np.zeros((8, 4), "float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, x[:, :1], epochs=1, callbacks=[keras.callbacks.EarlyStopping(monitor="loss")])
"""


def _run_dir(project: Path, result: dict) -> Path:
    run = project / ".tfrepro" / "runs" / "20261201-120000"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return run


def test_report_loads_the_entry_the_run_recorded(tmp_path):
    project = tmp_path / "my-training-repo"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT, encoding="utf-8")  # no tfrepro.toml, no repro.py
    settings = TrialSettings(entry="train.py").to_dict()
    run = _run_dir(project, {"status": "found", "symptom": "nan", "culprits": [], "settings": settings})
    ctx = load_context(run)
    assert ctx.entry == "train.py" and ctx.settings.entry == "train.py"
    assert ctx.project.detected and "callback_early_stopping" in ctx.project.feature_names


def test_report_loads_the_runs_own_project_not_one_found_below_it(tmp_path):
    """One root: the project whose .tfrepro/ holds the run, with the entry it
    recorded; a marker beside the script (sub/pyproject.toml) does not make
    sub/ the project, as `bisect` did not (before, the report re-found the
    root from the script and read sub/ without its tfrepro.toml)."""
    project = tmp_path / "repo"
    (project / "sub").mkdir(parents=True)
    (project / "sub" / "train.py").write_text(SCRIPT, encoding="utf-8")
    (project / "sub" / "pyproject.toml").write_text("[project]\nname = 'sub'\n", encoding="utf-8")
    (project / "tfrepro.toml").write_text('[trial]\nentry = "sub/train.py"\nsteps = 7\n', encoding="utf-8")
    settings = TrialSettings(entry="sub/train.py", steps=7).to_dict()
    run = _run_dir(project, {"status": "found", "symptom": "nan", "culprits": [], "settings": settings})
    ctx = load_context(run)
    assert ctx.project.root == project.resolve() and ctx.entry == "sub/train.py"
    assert ctx.project.manifest.trial.steps == 7  # the run's tfrepro.toml


def _sha(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


def test_a_commit_runs_own_shas_are_not_secrets_and_other_hex_still_is(tmp_path):
    shas = [_sha(i) for i in range(4)]
    result = {
        "status": "found",
        "first_bad_commit": shas[2],
        "tried": [{"sha": s, "verdict": "ok" if i < 2 else "nan"} for i, s in enumerate(shas)],
    }
    assert run_commits(result) == frozenset(shas)
    assert run_commits({"status": "found", "culprits": ["a"], "api_key": _sha(9)}) == frozenset()
    # what tables.py writes for the TensorBoard HParams view: one "label" line per trial
    (tmp_path / "trials.json").write_text(json.dumps([{"label": s, "verdict": "ok"} for s in shas], indent=2))
    flagged = scan_bundle(tmp_path)
    assert [f.kind for f in flagged] == [HEX_KIND] * 4  # the bug: every sha a "secret"
    assert scan_bundle(tmp_path, commits=run_commits(result)) == []
    # a 40-hex value the run did not try (a W&B key in a label-shaped line) is still found
    (tmp_path / "wandb.json").write_text(json.dumps({"label": _sha(99)}, indent=2))
    assert [(f.file, f.line) for f in scan_bundle(tmp_path, commits=run_commits(result))] == [("wandb.json", 2)]
