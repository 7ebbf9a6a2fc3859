"""trials.csv and the TensorBoard HParams view written into every run dir."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import tb_read
from click.testing import CliRunner
from gitrepo import GitRepo, isolated_git_env

from tfrepro.cli import main
from tfrepro.report import tables
from tfrepro.report.tables import write_trial_tables

STEPS = [0.5, 0.01, 0.002, 0.003, 0.003]  # steady (past the 3 warm-up steps): median 0.003, as written


def _fake_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    rows = []
    for i, (enabled, role, verdict, losses) in enumerate(
        [
            ([], "baseline", "ok", [1.0, 0.5, 0.25, 0.125, 0.0625]),
            (["amp", "xla"], "failing", "nan", [1.0, None]),
            (["xla"], "search", "ok", [1.0, 0.5, 0.25, 0.125, 0.0625]),
        ],
        1,
    ):
        d = run / "trials" / f"{i:03d}"
        d.mkdir(parents=True)
        s = {
            "label": role,
            "losses": losses,
            "step_times": STEPS[: len(losses)],
            "steps_run": len(losses),
            "first_nonfinite_step": 2 if None in losses else None,
            "wall_s": 1.5,
            "cached": False,
            "median_step_time": 0.003 if len(losses) > 2 else None,
        }
        (d / "summary.json").write_text(json.dumps(s))
        rows.append(
            {
                "enabled": enabled,
                "verdict": verdict,
                "summary": f"trials/{i:03d}/summary.json",
                "cached": i == 3,
                "role": role,
                "repeat": 0,
            }
        )
    (run / "result.json").write_text(json.dumps({"status": "found", "features": ["amp", "xla"], "trials_table": rows}))
    return run


def test_trials_csv_one_row_per_trial(tmp_path):
    run = _fake_run(tmp_path)
    written = write_trial_tables(run)
    assert written == {"trials.csv": run / "trials.csv", "tensorboard": run / "tensorboard"}
    assert (run / "trials.csv").read_text().splitlines() == [
        "index,role,repeat,label,features_on,verdict,steps,first_loss,last_loss,first_nonfinite_step,"
        "median_step_ms,wall_s,cached",
        "1,baseline,0,,,ok,5,1,0.0625,,3,1.5,False",
        "2,failing,0,,amp;xla,nan,2,1,nan,2,,1.5,False",
        "3,search,0,,xla,ok,5,1,0.0625,,3,1.5,True",
    ]


def test_a_summary_without_a_median_gets_the_trials_own_warm_up_rule(tmp_path):
    """A summary that has no median (an older one) gets the median the trial
    itself would give: without the same warm-up steps as TrialResult and
    steps.png, so a trial too short for a steady step has none in trials.csv either."""
    from tfrepro.report.tables import _median_ms
    from tfrepro.settings import WARMUP_STEPS
    from tfrepro.trials.values import TrialResult

    for n in range(WARMUP_STEPS + 3):
        times = tuple(0.001 * (i + 1) for i in range(n))
        own = TrialResult(label="x", step_times=times).median_step_time()
        got = _median_ms(TrialResult.from_dict({"label": "x", "step_times": list(times)}))
        assert got == (None if own is None else pytest.approx(1000.0 * own)), n


def test_hparams_sessions_load_in_tensorboard(tmp_path):
    """TensorBoard's own HParams plugin reads one session per trial: the
    features as booleans against the verdict, and the metrics."""
    run = _fake_run(tmp_path)
    write_trial_tables(run)
    assert sorted(p.name for p in (run / "tensorboard").iterdir()) == ["001_baseline", "002_failing", "003_search"]
    domains, groups = tb_read.hparams_view(run / "tensorboard")
    assert domains == {
        "amp": {False, True},
        "xla": {False, True},
        "role": {"baseline", "failing", "search"},
        "verdict": {"nan", "ok"},
    }
    hp, metrics = groups["002_failing"]
    assert hp == {"amp": True, "xla": True, "role": "failing", "verdict": "nan"}
    assert metrics["shows_symptom"] == (2, 1.0) and math.isnan(metrics["final_loss"][1])
    hp, metrics = groups["001_baseline"]
    assert hp == {"amp": False, "xla": False, "role": "baseline", "verdict": "ok"}
    assert metrics["shows_symptom"] == (5, 0.0) and metrics["median_step_ms"] == (5, pytest.approx(3.0))
    loss = tb_read.scalars(run / "tensorboard" / "002_failing" / tables.EVENT_FILE)["loss"]
    assert loss[0] == (1, 1.0) and loss[1][0] == 2 and math.isnan(loss[1][1])


def test_writing_the_tables_does_not_import_tensorflow(tmp_path):
    run = _fake_run(tmp_path)
    code = (
        "import sys\n"
        "from tfrepro.report.tables import write_trial_tables\n"
        f"write_trial_tables({str(run)!r})\n"
        "print([m for m in ('tensorflow', 'keras', 'tensorboard') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]" and out.stderr == ""
    assert (run / "tensorboard" / "002_failing" / tables.EVENT_FILE).stat().st_size > 0


FEATURE_LOOP = """loss = 1.0
scale = 1.0
# tfrepro: feature blowup -- the loss goes to NaN
# scale = float("nan")
# tfrepro: end
# tfrepro: feature other -- harmless
# x = 1
# tfrepro: end
for step in range(1, 6):
    loss *= 0.9
    print(f"step={step} loss={loss * scale}", flush=True)
"""


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_feature_bisect_writes_trials_csv_and_hparams(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "repro.py").write_text(FEATURE_LOOP)
    r = CliRunner().invoke(main, ["bisect", str(tmp_path / "p"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = _csv(Path(doc["run_dir"]) / "trials.csv")
    assert len(rows) == doc["trials"] and rows[0]["role"] == "baseline"
    assert {row["verdict"] for row in rows if row["features_on"] == "blowup"} == {"nan"}
    assert "trials: " in r.stderr and "tensorboard --logdir" in r.stderr
    assert len(list((Path(doc["run_dir"]) / "tensorboard").iterdir())) == doc["trials"]


def test_commit_bisect_writes_trials_csv_labelled_by_commit(tmp_path, monkeypatch):
    isolated_git_env(tmp_path / "home", monkeypatch)
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    good = repo.commit("ok", {"repro.py": FEATURE_LOOP})
    bad = repo.commit("nan", {"repro.py": FEATURE_LOOP.replace('# scale = float("nan")', 'scale = float("nan")')})
    r = CliRunner().invoke(main, ["bisect", str(repo.root), "--good", good, "--bad", bad, "--json"])
    assert r.exit_code == 0, r.output
    rows = _csv(Path(json.loads(r.stdout)["run_dir"]) / "trials.csv")
    assert {(row["label"], row["verdict"]) for row in rows} >= {(good, "ok"), (bad, "nan")}


def test_a_range_bisect_writes_its_tables_into_the_run_its_answer_names(tmp_path, monkeypatch):
    """Every mode's tables go to its result's run dir: not to the newest run
    dir of the project (--then-features makes one after the version run's)."""
    from tfrepro.bisect import commits
    from tfrepro.trials.values import RunResult, Status

    answered = _fake_run(tmp_path)
    newer = tmp_path / "p" / ".tfrepro" / "runs" / "29991231-000000"
    newer.mkdir(parents=True)
    (newer / "result.json").write_text(json.dumps({"status": "found", "trials_table": []}))
    (tmp_path / "p" / "repro.py").write_text("print(1)\n")
    result = RunResult(status=Status.FOUND, run_dir=str(answered))
    monkeypatch.setattr(commits, "bisect_commits", lambda *a, **k: result)
    r = CliRunner().invoke(main, ["bisect", str(tmp_path / "p"), "--good", "a", "--bad", "b"])
    assert r.exit_code == 0, r.output
    assert (answered / "trials.csv").is_file() and not (newer / "trials.csv").exists()
