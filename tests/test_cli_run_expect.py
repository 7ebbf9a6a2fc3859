"""`tfrepro run` exit codes, and `run --expect SYMPTOM` in `git bisect run`'s language."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitrepo import GitRepo

from tfrepro.cli import main
from tfrepro.cli.project_cmds import expect_verdict
from tfrepro.trials.values import TrialResult

ROOT = Path(__file__).resolve().parents[1]


def loop(nan_at: int | None = None, *, crash: bool = False, steps: int = 6) -> str:
    """A plain-Python custom loop (no TensorFlow) printing `step=N loss=X`."""
    body = ["import sys", "loss = 1.0", f"for step in range(1, {steps + 1}):", "    loss *= 0.9"]
    if nan_at is not None:
        body.append(f"    if step == {nan_at}: loss = float('nan')")
    body.append("    print(f'step={step} loss={loss}', flush=True)")
    if crash:
        body.append("raise SystemExit('boom: unrelated')")
    return "\n".join(body) + "\n"


OK = TrialResult(losses=(1.0, 0.9), steps_run=2, mode="loop")
NAN = TrialResult(losses=(1.0, float("nan")), first_nonfinite_step=2, steps_run=2, mode="loop")
CRASH = TrialResult(losses=(1.0,), crashed=True, error="ValueError: shapes", exit_code=1, mode="loop")
TIMEOUT = TrialResult(timed_out=True, error="no step in 300 s")
NOTHING = TrialResult(mode="none")


@pytest.mark.parametrize(
    "results, symptom, code",
    [
        ([OK], "nan", 0),
        ([NAN], "nan", 1),
        ([CRASH], "nan", 125),
        ([TIMEOUT], "nan", 125),
        ([NOTHING], "nan", 125),
        ([OK, NAN], "nan", 1),
        ([CRASH], "crash", 1),
        ([NAN], "crash", 0),
        ([TIMEOUT], "crash", 125),
        ([TIMEOUT], "timeout", 1),
        ([CRASH], "timeout", 125),
        ([OK], "timeout", 0),
    ],
)
def test_expect_verdict(results, symptom, code):
    assert expect_verdict(results, symptom)[0] == code


def _project(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p"
    p.mkdir(exist_ok=True)
    (p / "repro.py").write_text(text)
    return p


def test_plain_run_exits_1_on_a_nan_and_0_when_healthy(tmp_path):
    r = CliRunner().invoke(main, ["run", str(_project(tmp_path, loop(nan_at=3)))])
    assert r.exit_code == 1, r.output
    assert "first non-finite loss at step 3" in r.stdout
    r = CliRunner().invoke(main, ["run", str(_project(tmp_path, loop())), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["first_nonfinite_step"] is None


def test_expect_nan_good_bad_and_cannot_test(tmp_path):
    p = _project(tmp_path, loop(nan_at=3))
    r = CliRunner().invoke(main, ["run", str(p), "--expect", "nan"])
    assert r.exit_code == 1 and r.stdout.splitlines()[-1] == "expect nan: present -> exit 1 (bad)"
    p = _project(tmp_path, loop())
    r = CliRunner().invoke(main, ["run", str(p), "--expect", "nan", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["expect"] == {"symptom": "nan", "exit_code": 0, "reason": "absent"}
    p = _project(tmp_path, loop(crash=True))
    r = CliRunner().invoke(main, ["run", str(p), "--expect", "nan"])
    assert r.exit_code == 125 and "crashed (not the symptom expected): boom: unrelated" in r.stdout
    (p / "tfrepro.toml").write_text("[trial]\nsteps = 0\n")  # a commit whose project cannot be loaded
    r = CliRunner().invoke(main, ["run", str(p), "--expect", "nan", "--json"])
    assert r.exit_code == 125 and json.loads(r.stdout)["exit_code"] == 125


def test_git_bisect_run_finds_the_commit_that_planted_the_nan(tmp_path):
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    k = 5  # commit index (0-based) that plants the NaN
    for i in range(8):
        repo.commit(
            f"change {i}", {"repro.py": loop(nan_at=4 if i >= k else None, steps=6 + i % 2), "notes.txt": f"{i}\n"}
        )
    env = {**repo.env, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        ["git", "bisect", "start", repo.commits[-1], repo.commits[0]],
        cwd=repo.root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    run = subprocess.run(
        ["git", "bisect", "run", sys.executable, "-m", "tfrepro", "run", "--expect", "nan"],
        cwd=repo.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{repo.commits[k]} is the first bad commit" in run.stdout
    assert "change 5" in run.stdout
    subprocess.run(["git", "bisect", "reset"], cwd=repo.root, env=env, capture_output=True, check=True)
    assert repo.git("status", "--porcelain") == ""  # .tfrepro/ ignores itself
    assert os.path.isdir(repo.root / ".tfrepro")
