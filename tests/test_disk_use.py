"""Issue 24, disk: trial copies cost what they must. A trial's variant copy
is removed once its result is stored (results are kept, not copies), the
state dir is pruned by size as well as count, and a full disk is one clear
message with the half-written trial removed and nothing cached."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfrepro.trials.runner import DiskFullError, cached
from tfrepro.trials.state import StateDir, tree_size
from tfrepro.trials.values import TrialResult

PY = sys.executable
MB = 1 << 20

SCRIPT = """\
import math
# tfrepro: feature a -- demo
A = 1
# tfrepro: else
# A = 0
# tfrepro: end
# tfrepro: feature b -- demo
B = 1
# tfrepro: else
# B = 0
# tfrepro: end
# tfrepro: feature c -- demo
C = 1
# tfrepro: else
# C = 0
# tfrepro: end
with open("data.bin", "rb") as f:
    f.read(16)
for i in range(1, 9):
    loss = float("nan") if C and i > 4 else 1.0 / i
    print(f"step={i} loss={loss}")
"""


@pytest.mark.e2e
def test_a_bisect_of_a_project_with_large_data_leaves_under_twice_its_size(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text(SCRIPT)
    (root / "data.bin").write_bytes(os.urandom(4 * MB))
    project_size = tree_size(root)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    r = subprocess.run(
        [PY, "-m", "tfrepro", "bisect", str(root), "--steps", "8", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )

    doc = json.loads(r.stdout)
    assert doc["status"] == "found" and doc["culprits"] == ["c"], (doc, r.stderr)
    trials = list((root / ".tfrepro" / "trials").iterdir())
    assert len(trials) >= 6  # baseline twice, the failing end, the search, the replays
    assert tree_size(root / ".tfrepro") < 2 * project_size
    assert not list((root / ".tfrepro" / "trials").glob("*/variant"))
    assert all((t / "result.json").is_file() and (t / "stdout.log").is_file() for t in trials)


def test_a_full_disk_while_copying_is_one_clear_error_and_the_half_copy_goes_at_once(tmp_path):
    state = StateDir(tmp_path / ".tfrepro")
    seen: list[Path] = []

    def execute(trial_dir: Path) -> TrialResult:
        seen.append(trial_dir)
        (trial_dir / "variant").mkdir()
        (trial_dir / "variant" / "data.bin").write_bytes(b"\0" * 1000)  # the half copy
        raise OSError(errno.ENOSPC, "No space left on device", str(trial_dir / "variant" / "big.bin"))

    with pytest.raises(DiskFullError) as e:
        cached(state, "ab" * 32, (), "", True, execute)

    assert "no space left" in str(e.value) and "tfrepro clean" in str(e.value)
    assert not seen[0].exists()
    assert not state.cache_file("ab" * 32).exists()


def test_a_trial_that_crashed_of_a_full_disk_is_not_cached(tmp_path):
    state = StateDir(tmp_path / ".tfrepro")

    def execute(trial_dir: Path) -> TrialResult:
        return TrialResult(crashed=True, exit_code=1, error="OSError: [Errno 28] No space left on device")

    with pytest.raises(DiskFullError):
        cached(state, "cd" * 32, (), "", True, execute)
    assert not state.cache_file("cd" * 32).exists()


def test_prune_keeps_the_trial_dirs_under_a_size_budget_newest_first(tmp_path):
    state = StateDir(tmp_path / ".tfrepro")
    made = []
    for i in range(5):
        d = state.new_trial_dir(f"{i:016x}")
        (d / "result.json").write_text("{}")
        (d / "stdout.log").write_bytes(b"x" * 1000)
        state.release(d)
        os.utime(d, (1000 + i, 1000 + i))
        made.append(d)

    state.prune(keep_runs=10, keep_trials=100, keep_bytes=2 * tree_size(made[0]) + 100)

    assert [d.exists() for d in made] == [False, False, False, True, True]
