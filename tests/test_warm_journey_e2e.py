"""Warm equals cold on the journey scripts (real processes, real TensorFlow).

The journey scripts (benchmarks/journey/<case>/train.py) are unmarked user
scripts: each is copied alone into a folder of its own and loaded zero-edit
(features detected in memory), as `tfrepro bisect train.py` does. For one
script per symptom family - nan, crash, slowdown, memory, mismatch, healthy -
its baseline (all features OFF) and its failing configuration (all ON),
seeded and deterministic as the runner makes them, run cold and then warm
through `run_variant`: the per-step losses must be bit-identical, the crash
line, the first non-finite step and the timeout the same, and `classify`
must give warm and cold the same verdict against one reference, the cold
baseline (no run is compared with itself: every warm run with its own cold
twin). 12 steps per trial (the memory case: 50, the project's default, past
its allocator's warm-up: a healthy baseline's memory at 12 steps differs
from run to run, cold against cold too) and one warm server for the module
keep this at about a minute on 2 cores. `benchmarks/warm_vs_cold.py --suite journey`
covers every journey script with the project's 50 steps (docs/benchmarks.md).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tfrepro.project import Project
from tfrepro.trials import classify, warm
from tfrepro.trials.runner import run_variant
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult

pytestmark = pytest.mark.e2e

JOURNEY = Path(__file__).resolve().parents[1] / "benchmarks" / "journey"
STEPS = 12
STEPS_OF = {"weight_history_memory": 50}
# case -> the cold all-ON verdict against the cold baseline (the symptom shows
# within 12 steps, or the script's shuffle makes the all-ON losses differ
# from the all-OFF ones: a mismatch; slowdown is never classify's decision)
CASES = {
    "custom_softmax_nan": "nan",
    "xla_unique_crash": "crash",
    "eager_left_on": "mismatch",  # slowdown family
    "weight_history_memory": "memory",
    "cache_after_shuffle": "mismatch",
    "healthy": "mismatch",  # its shuffle (affects_loss) is OFF in the baseline
}


@pytest.fixture(scope="module")
def pool():
    p = warm.WarmPool()
    yield p
    p.close()


def bits(losses) -> list[str]:
    """Bit for bit; a non-finite loss (stored as None, read back as NaN) equals another."""
    return [x.hex() if x == x else "nan" for x in losses]


def end(r: TrialResult) -> tuple:
    return (r.crashed, r.error, r.first_nonfinite_step, r.timed_out)


def trial(proj: Project, enabled, tmp: Path, tag: str, pool, *, cold: bool, steps: int = STEPS) -> TrialResult:
    settings = replace(proj.manifest.trial, steps=steps, timeout_s=300)
    assert settings.deterministic and settings.seed == 0
    how = "cold" if cold else "warm"
    variant = tmp / f"variant-{tag}-{how}"  # each run its own: the scripts write relative files
    proj.write_variant(enabled, variant)
    return run_variant(variant, settings, tmp / f"trial-{tag}-{how}", TrialOptions(cold=cold), warm_pool=pool)


@pytest.mark.parametrize("case", sorted(CASES))
def test_journey_script_warm_and_cold_give_identical_losses_and_verdicts(tmp_path, pool, case):
    home = tmp_path / case
    home.mkdir()
    shutil.copy2(JOURNEY / case / "train.py", home / "train.py")
    proj = Project.load(home / "train.py")
    assert proj.detected and proj.feature_names
    sym = proj.manifest.symptoms
    runs = {}
    for config, enabled in [("baseline", ()), ("all-on", proj.feature_names)]:
        for cold in (True, False):
            runs[config, cold] = trial(
                proj, enabled, tmp_path, config, pool, cold=cold, steps=STEPS_OF.get(case, STEPS)
            )
    reference = runs["baseline", True]
    assert reference.losses and not reference.crashed, reference.error
    for config in ("baseline", "all-on"):
        cold, hot = runs[config, True], runs[config, False]
        where = f"{case} {config}"
        assert (cold.extra["process"], hot.extra["process"]) == ("cold", "warm"), where
        assert bits(hot.losses) == bits(cold.losses), where
        assert end(hot) == end(cold), where
        verdicts = [
            classify.primary(classify.symptoms(r, reference=reference, settings=sym, baselines=(reference,))).value
            for r in (cold, hot)
        ]
        assert verdicts[1] == verdicts[0], where
        if config == "all-on":
            assert verdicts[0] == CASES[case], where
            assert cold.crashed or len(cold.losses) == (cold.first_nonfinite_step or STEPS_OF.get(case, STEPS)), where
