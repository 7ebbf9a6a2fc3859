"""Issue 24: `[trial] seed` is validated (0 <= seed < 2**32, exit 2 with
file:line), and every cache read is validated (an entry holding `[]` or
garbage is a miss, never an exception)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfrepro.trials.state import StateDir
from tfrepro.trials.values import TrialResult, load_result

PY = sys.executable


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([PY, "-m", "tfrepro", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**64)])
def test_a_seed_outside_0_to_2_32_is_refused_naming_the_line(tmp_path, seed):
    (tmp_path / "repro.py").write_text("print('step=1 loss=0.5')\n")
    (tmp_path / "tfrepro.toml").write_text(f"# settings\n[trial]\nseed = {seed}\n")

    r = cli("run", str(tmp_path), "--steps", "1")

    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "tfrepro.toml:3: [trial] seed" in r.stderr and seed in r.stderr


def test_the_largest_seed_is_accepted(tmp_path):
    (tmp_path / "repro.py").write_text("print('step=1 loss=0.5')\n")
    (tmp_path / "tfrepro.toml").write_text(f"[trial]\nseed = {2**32 - 1}\n")

    r = cli("run", str(tmp_path), "--steps", "1", "--json")

    assert r.returncode == 0, r.stderr


GARBAGE = ["[]", "null", '"x"', "{", '{"crashed": "yes"}', '{"losses": "abc"}', '{"enabled": 5}', '{"extra": []}']
# Every list field's items are checked against the one table from_dict reads them with (values.LISTS).
GARBAGE += ['{"devices": [0]}', '{"compile_modes": ["xla"]}', '{"rss_per_step": [1.5]}', '{"step_times": [true]}']


@pytest.mark.parametrize("garbage", GARBAGE)
def test_a_garbage_cache_entry_is_a_miss(tmp_path, garbage):
    state = StateDir(tmp_path / ".tfrepro")
    key = "ab" * 32
    state.store(key, TrialResult(losses=(0.5,), steps_run=1, mode="fit", key=key))
    assert load_result(state.cache_file(key), key) is not None
    state.cache_file(key).write_text(garbage)

    assert load_result(state.cache_file(key), key) is None


def test_an_entry_stored_under_another_key_is_a_miss(tmp_path):
    state = StateDir(tmp_path / ".tfrepro")
    state.store("ab" * 32, TrialResult(losses=(0.5,), steps_run=1, mode="fit", key="ab" * 32))
    state.sub("cache")
    state.cache_file("cd" * 32).write_bytes(state.cache_file("ab" * 32).read_bytes())

    assert load_result(state.cache_file("cd" * 32), "cd" * 32) is None


def test_a_real_run_over_a_cache_entry_holding_a_list_runs_the_trial_again(tmp_path):
    (tmp_path / "repro.py").write_text("print('step=1 loss=0.5')\n")
    first = cli("run", str(tmp_path), "--steps", "1", "--json")
    assert first.returncode == 0, first.stderr
    (entry,) = (tmp_path / ".tfrepro" / "cache").glob("*.json")
    entry.write_text("[]")

    again = cli("run", str(tmp_path), "--steps", "1", "--json")

    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert json.loads(again.stdout)["cached"] is False
    assert json.loads(entry.read_text())["steps_run"] == 1  # stored again, well-formed
