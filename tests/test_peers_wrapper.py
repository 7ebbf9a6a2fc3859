"""benchmarks/peers.py's wrapper: environment -> configuration -> metric (no TF)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parent.parent / "benchmarks" / "peers.py"
spec = importlib.util.spec_from_file_location("peers_bench", PEERS)
peers = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = peers  # its dataclasses look their module up
spec.loader.exec_module(peers)

FEATURES = ["cache", "mixed_precision", "prefetch"]


def test_mlbisect_axis_variables_pick_the_features_on():
    env = {"MLBISECT_AXIS_MIXED_PRECISION": "1", "MLBISECT_AXIS_CACHE": "0", "MLBISECT_AXIS_PREFETCH": "1"}
    assert peers.configuration_from_env(env, FEATURES) == ["mixed_precision", "prefetch"]


def test_tfrepro_feature_variables_win_and_absent_means_off():
    env = {"TFREPRO_FEATURE_cache": "1", "MLBISECT_AXIS_CACHE": "0", "MLBISECT_AXIS_PREFETCH": "0"}
    assert peers.configuration_from_env(env, FEATURES) == ["cache"]
    assert peers.configuration_from_env({}, FEATURES) == []


def test_a_value_other_than_0_or_1_is_refused():
    with pytest.raises(ValueError, match="TFREPRO_FEATURE_cache='yes'"):
        peers.configuration_from_env({"TFREPRO_FEATURE_cache": "yes"}, FEATURES)


def test_the_command_is_one_uncached_trial_of_that_configuration():
    cmd = peers.run_command(Path("/p"), ["a", "b"])
    assert cmd[1:] == ["-m", "tfrepro", "run", "/p", "--with", "a,b", "--repeats", "1", "--json", "--no-cache"]
    assert "--none" in peers.run_command(Path("/p"), [])


def test_the_metric_is_failure_or_log2_step_time():
    assert peers.metric_from_summary({"nonfinite": True, "median_step_time": None}) == peers.BAD_FAILED
    assert peers.metric_from_summary({"crashed": True}) == peers.BAD_FAILED
    assert peers.metric_from_summary({"timed_out": True}) == peers.BAD_FAILED
    slow, fast = (peers.metric_from_summary({"median_step_time": t}) for t in (0.024, 0.008))
    assert math.isclose(slow - fast, math.log2(3))
    with pytest.raises(ValueError):
        peers.metric_from_summary({"median_step_time": None, "error": "no step"})


def test_the_manifest_maps_each_feature_to_an_off_on_axis():
    doc = peers.manifest("demo", FEATURES, Path("/p"), {"max_runs": 60})
    assert [(a["name"], a["old"], a["new"]) for a in doc["axes"]] == [(f, "0", "1") for f in FEATURES]
    assert doc["metric"]["direction"] == "lower_is_better"
    assert doc["run"]["command"].endswith(" wrap /p")


def test_right_answers_on_the_mlbisect_side():
    found = {"status": "found", "culprits": ["custom_norm", "mixed_precision"]}
    assert peers.mlbisect_right(
        found, {"status": "culprit_found", "culprit_sets": [["custom_norm", "mixed_precision"]]}
    )
    assert not peers.mlbisect_right(found, {"status": "culprit_found", "culprit_sets": [["mixed_precision"]]})
    assert not peers.mlbisect_right(found, {"status": "inconclusive", "culprit_sets": []})
    none = {"status": "none", "culprits": []}
    assert peers.mlbisect_right(none, {"status": "no_reproducible_regression", "culprit_sets": []})
    assert not peers.mlbisect_right(none, {"status": "inconclusive", "culprit_sets": []})
