"""`tfrepro bisect` end to end: the real CLI, real trial subprocesses, a real kill.

The planted projects are tiny Python scripts printing `step=N loss=X` lines (a
custom loop as far as the harness is concerned): every trial is a real
subprocess through `trial.run_trial` and its cache, without TensorFlow's
start-up cost. One test runs `tfrepro demo` with real TensorFlow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfrepro.settings import SymptomSettings

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[1]
FEATURES = [f"f{i}" for i in range(8)]
CONTRACT4 = {
    "status": str,
    "symptom": (str, type(None)),
    "culprits": list,
    "baseline": (dict, type(None)),
    "trials": int,
    "wall_s": (int, float),
    "run_dir": str,
    "first_bad_commit": type(None),
}

SCRIPT = """\
import os, signal, time
{gate}
loss, pause = 2.0, 0.004
{blocks}
for step in range(1, 100):
    time.sleep(pause)
    loss = loss * 0.9
    if step >= 3 and nan:
        loss = float("nan")
    print(f"step={{step}} loss={{loss}}", flush=True)
"""


def planted(
    tmp_path: Path,
    *,
    nan: tuple[str, ...] = (),
    slow: str | None = None,
    crash_always=False,
    gate: Path | None = None,
    steps: int = 6,
) -> Path:
    """A project with features f0..f7; `nan`: the set of features that
    together make the loss NaN at step 3; `slow`: a feature that triples the
    step time; `gate`: while that file exists, every trial notes its start
    in it and the fifth and later ones block until killed."""
    blocks = ["nan_parts = set()" if nan else "nan = False"]
    for f in FEATURES:
        body = []
        if f in nan:
            body.append(f"nan_parts.add({f!r})")
        if f == slow:
            body.append("pause = 0.012")
        body = body or ["pass"]
        blocks += [f"# tfrepro: feature {f} -- feature {f}"] + [f"# {line}" for line in body] + ["# tfrepro: end"]
    if nan:
        blocks.append(f"nan = nan_parts == {set(nan)!r}")
    if crash_always:
        blocks.append("raise RuntimeError('broken before any feature')")
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    held = (
        f"if os.path.exists({str(gate)!r}):\n"
        f"    with open({str(gate)!r}, 'a') as f:\n        f.write('started\\n')\n"
        f"    if len(open({str(gate)!r}).read().split()) > 4:\n        signal.pause()\n"
        if gate
        else ""
    )
    (root / "repro.py").write_text(SCRIPT.format(gate=held, blocks="\n".join(blocks)))
    (root / "tfrepro.toml").write_text(f"[trial]\nsteps = {steps}\ntimeout_s = 60\n")
    return root


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tfrepro", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def check_contract4(doc: dict) -> None:
    for key, types in CONTRACT4.items():
        assert isinstance(doc[key], types), (key, doc[key])
    assert doc["culprits"] == sorted(doc["culprits"])


def test_bisect_json_finds_the_planted_pair_and_writes_the_run_dir(tmp_path):
    root = planted(tmp_path, nan=("f2", "f6"))
    proc = cli("bisect", "--json", "--jobs", "2", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one JSON object, nothing else on stdout
    check_contract4(doc)
    assert (doc["status"], doc["symptom"], doc["culprits"]) == ("found", "nan", ["f2", "f6"])
    assert doc["flaky"] is False and doc["reproduction_rate"] == 1.0
    run_dir = tmp_path / doc["run_dir"]
    assert run_dir.parent == root / ".tfrepro" / "runs"
    assert json.loads((run_dir / "result.json").read_text()) == doc
    for row in doc["trials_table"]:
        trial = run_dir / row["summary"]
        assert json.loads(trial.read_text())["enabled"] == row["enabled"]
        assert "step=1 loss=" in (trial.parent / "stdout.log").read_text()
    assert doc["baseline"]["mode"] == "loop" and doc["baseline"]["steps_run"] == 6


def test_healthy_and_broken_baseline_statuses_and_exit_codes(tmp_path):
    healthy = planted(tmp_path / "a")
    proc = cli("bisect", "--json", str(healthy), cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert (proc.returncode, doc["status"], doc["symptom"], doc["trials"]) == (3, "none", None, 3)

    broken = planted(tmp_path / "b", crash_always=True)
    proc = cli("bisect", str(broken), cwd=tmp_path)  # the human output
    assert proc.returncode == 1
    assert "baseline-fails: the baseline (every feature off) already shows crash" in proc.stdout
    assert "RuntimeError: broken before any feature" in proc.stdout


def test_slowdown_with_real_timing(tmp_path):
    root = planted(tmp_path, slow="f3", steps=12)
    proc = cli("bisect", "--json", "--jobs", "2", str(root), cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert (doc["status"], doc["symptom"], doc["culprits"]) == ("found", "slowdown", ["f3"]), proc.stderr
    t = doc["timing"]
    # decided by clear pairs (at least 2: search + replay) or by the rank test,
    # at a ratio the rule calls slower (no figure for how much slower real sleeps are under load)
    assert t["ratio"] >= SymptomSettings().slowdown and t["conclusive"] and (t["fast"] or t["p_value"] <= 0.05)
    assert len(t["pairs"]) >= 2


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_killed_midway_then_rerun_reaches_the_same_answer_without_running_a_finished_trial_twice(tmp_path):
    gate = tmp_path / "gate"  # four trials finish, the fifth blocks: the bisect cannot end before the kill
    gate.write_text("")
    root = planted(tmp_path, nan=("f5",), gate=gate)
    cache = root / ".tfrepro" / "cache"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tfrepro", "bisect", "--json", str(root)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None and len(list(cache.glob("*.json"))) < 4:
        time.sleep(0.02)
    assert child.poll() is None, child.communicate()
    trials = _children(child.pid)  # the running trial: its own session, ours to stop too
    os.kill(child.pid, signal.SIGKILL)
    for pid in trials:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    child.communicate()
    finished = {p.stem for p in cache.glob("*.json")}
    assert len(finished) >= 4
    assert not list((root / ".tfrepro" / "runs").glob("*/result.json"))  # it really died midway

    gate.unlink()  # the rerun's trials run through
    proc = cli("bisect", "--json", str(root), cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert (doc["status"], doc["culprits"]) == ("found", ["f5"])
    rows = {r["key"]: r for r in doc["trials_table"]}
    assert finished <= set(rows)  # the rerun asked for the same trials ...
    assert all(rows[k]["cached"] for k in finished)  # ... and took every finished one from the cache
    assert any(not r["cached"] for r in rows.values())  # and ran the rest itself
    # one trial directory per finished trial: none was run a second time
    dirs = [d.name for d in (root / ".tfrepro" / "trials").iterdir()]
    for key in finished:
        assert sum(d.startswith(key[:16] + "-") for d in dirs) == 1

    again = cli("bisect", "--json", str(root), cwd=tmp_path)
    doc2 = json.loads(again.stdout)
    assert doc2["culprits"] == ["f5"] and all(r["cached"] for r in doc2["trials_table"])


def test_demo_finds_the_planted_culprit_with_tensorflow():
    proc = cli("demo", "--jobs", "2", cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "nan: caused by mixed_precision" in proc.stdout
    assert "the planted culprit was found: mixed_precision" in proc.stdout
