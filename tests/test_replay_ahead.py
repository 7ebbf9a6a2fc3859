"""ddmin's last pair with a slot to spare (`engine._test_final`): {x} runs
beside the one-run replay's trial of {x}, not beside its sibling {y}. Fake
trials (tests/test_engine's FakeRunner), no TensorFlow.

What it promises: the same answers as a serial run; the demo's shape (one
deterministic NaN among five features, the culprit first of the last pair)
in 8 trials at `--jobs 2`, where running the sibling took 9; the replay's
trial asked for with the search's, not after it; and no speculation
where the one-run replay cannot apply."""

from __future__ import annotations

import itertools

import pytest
from test_engine import NAN, FakeRunner, make_project, nan_when

from tfrepro.bisect.engine import BisectOptions, bisect

DEMO = ["cache", "csv_logger", "early_stopping", "mixed_precision", "prefetch"]


def _roles(doc: dict) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(r["enabled"]), r["role"]) for r in doc["trials_table"]]


def test_the_demo_shape_takes_8_trials_at_two_jobs_with_the_replay_beside_the_search(tmp_path):
    runner = FakeRunner(nan_when("mixed_precision"))
    doc = bisect(make_project(tmp_path, DEMO), BisectOptions(jobs=2), runner=runner).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["mixed_precision"])
    assert doc["trials"] == 8 and doc["reproduction_rate"] == 1.0
    roles = _roles(doc)
    assert (("prefetch",), "search") not in roles  # the sibling the answer did not need
    # the replay's trial was asked for in the search's batch: before the
    # nan-state trial, which follows the search (after it, it would follow)
    assert roles[-3:] == [
        (("mixed_precision",), "search"),
        (("mixed_precision",), "replay"),
        (("mixed_precision",), "nan-state"),
    ] or roles[-3:] == [
        (("mixed_precision",), "replay"),
        (("mixed_precision",), "search"),
        (("mixed_precision",), "nan-state"),
    ]


def test_a_culprit_second_in_the_last_pair_costs_the_one_trial_its_sibling_saved(tmp_path):
    one = bisect(make_project(tmp_path / "1", DEMO), runner=FakeRunner(nan_when("prefetch"))).to_dict()
    two = bisect(make_project(tmp_path / "2", DEMO), BisectOptions(jobs=2), runner=FakeRunner(nan_when("prefetch")))
    two = two.to_dict()
    assert (two["status"], two["culprits"]) == (one["status"], one["culprits"]) == ("found", ["prefetch"])
    # serial: 9 (mixed_precision, then prefetch, then its replay); two jobs:
    # 10, the replay of mixed_precision run beside it not being needed
    assert (one["trials"], two["trials"]) == (9, 10)
    assert _roles(two).count((("mixed_precision",), "replay")) == 1


CASES = [{c} for c in DEMO] + [set(p) for p in itertools.combinations(DEMO, 2)]


@pytest.mark.parametrize("needed", CASES, ids=lambda s: "+".join(sorted(s)))
def test_two_jobs_give_the_serial_answer(tmp_path, needed):
    docs = [
        bisect(make_project(tmp_path / str(j), DEMO), BisectOptions(jobs=j), runner=FakeRunner(nan_when(*needed)))
        for j in (1, 2)
    ]
    one, two = (d.to_dict() for d in docs)
    assert (two["status"], two["culprits"], two["flaky"]) == (one["status"], one["culprits"], one["flaky"])
    assert two["culprits"] == sorted(needed)


def test_no_replay_beside_the_search_where_the_one_run_replay_cannot_apply(tmp_path):
    p = make_project(tmp_path, DEMO)
    (p.root / "tfrepro.toml").write_text("[trial]\nsteps = 20\ndeterministic = false\n")
    from tfrepro.project import Project

    doc = bisect(Project.load(p.root), BisectOptions(jobs=2), runner=FakeRunner(nan_when("mixed_precision")))
    doc = doc.to_dict()
    rows = [r["role"] for r in doc["trials_table"]]
    first_replay = rows.index("replay")
    # the full replay (3 fresh runs and 3 baselines), all after the search's trials
    assert "search" not in rows[first_replay:] and rows.count("replay") == 3
    assert doc["culprits"] == ["mixed_precision"]


def test_a_replay_run_ahead_that_differs_gets_the_full_replay(tmp_path):
    # the fresh run of mixed_precision (repeat 2, run beside the search) does
    # not go NaN: the one-run replay does not stand, the full replay runs and
    # the answer is flaky
    def behave(cfg, r):
        return NAN if "mixed_precision" in cfg and r != 2 else {}

    doc = bisect(make_project(tmp_path, DEMO), BisectOptions(jobs=2), runner=FakeRunner(behave)).to_dict()
    assert doc["status"] == "flaky" and doc["culprits"] == []
    assert [r["role"] for r in doc["trials_table"]].count("replay-baseline") == 3
