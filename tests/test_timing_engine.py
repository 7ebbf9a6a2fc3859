"""Slowdown hunts in the bisect engine, with a fake trial runner: time-budget
trials, one shared pool of baseline timing trials, clear pairs deciding
alone, the replay adding to the evidence, and the trial count of a bisect."""

from __future__ import annotations

import math
import random
import zlib

import pytest
from test_engine import FEATS, FakeRunner, make_project, slow_many

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict


def slow(feature: str, ratio: float, *, cv: float = 0.05, steps: int = 60):
    def behave(cfg, r):
        rng = random.Random(zlib.crc32(f"{sorted(cfg)}{r}".encode()))
        step = 0.002 * (ratio if feature in cfg else 1.0) * math.exp(rng.gauss(0, cv))
        return {
            "step_times": (0.5,) * 3 + tuple(step * math.exp(rng.gauss(0, 0.03)) for _ in range(steps)),
            "extra": {"others_cpu": 0.0},
        }  # a quiet machine

    return behave


def timing_rows(doc):
    return [r for r in doc["trials_table"] if r["role"].startswith("timing")]


def test_timing_trials_get_a_time_budget_and_the_others_do_not(tmp_path):
    p = make_project(tmp_path, FEATS)
    runner = FakeRunner(slow("xla", 3.0))
    opts = BisectOptions(timing_budget_s=0.5, timing_min_steps=20, timing_steps_max=900)
    doc = bisect(p, opts, runner=runner).to_dict()
    assert doc["status"] == "found" and doc["culprits"] == ["xla"]
    timing = {r["repeat"] for r in timing_rows(doc)}
    for enabled, settings in runner.cache:
        if settings.repeat in timing:
            assert (settings.min_time_s, settings.min_steps, settings.steps_max) == (0.5, 20, 900)
        else:
            assert settings.steps_max == 0 and "steps_max" not in settings.to_dict()


@pytest.mark.parametrize("culprit", FEATS)
def test_one_3x_culprit_among_6_features_in_at_most_20_trials(tmp_path, culprit):
    p = make_project(tmp_path, FEATS)
    doc = bisect(p, BisectOptions(), runner=FakeRunner(slow(culprit, 3.0))).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", [culprit])
    assert doc["trials"] <= 20, doc["trials"]


def test_one_baseline_pool_serves_the_candidates_on_both_sides(tmp_path):
    p = make_project(tmp_path, FEATS)
    runner = FakeRunner(slow("prefetch", 3.0))
    doc = bisect(p, BisectOptions(), runner=runner).to_dict()
    rows = timing_rows(doc)
    roles = [r["role"] for r in rows]
    # B C B C B ...: every candidate trial between two baseline trials, none shared twice in a row
    assert roles[0] == "timing-baseline" and roles[-1] == "timing-baseline"
    assert all(a != b for a, b in zip(roles, roles[1:]))
    assert roles.count("timing-baseline") == roles.count("timing") + 1
    # and they ran in that order (never concurrently: test_engine checks that)
    order = [(tuple(e), r) for e, r in runner.executed]
    timing = [(tuple(r["enabled"]), r["repeat"]) for r in rows]
    assert [x for x in order if x in timing] == timing


def test_a_110x_slower_step_is_decided_on_one_pair_and_replayed_on_one_more(tmp_path):
    p = make_project(tmp_path, ["cache", "xla"])
    doc = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(slow("xla", 110.0))).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"])
    t = doc["timing"]
    assert t["fast"] and len(t["pairs"]) == 2 and t["new_pairs"] == 1 and t["ratio"] > 50
    candidates = [r for r in timing_rows(doc) if r["role"] == "timing" and r["enabled"] == ["xla"]]
    assert len(candidates) == 2


def test_the_replay_continues_the_evidence_until_it_is_conclusive_again(tmp_path):
    # 1.6x with 5% noise: no clear pair, the rank test decides (from 5 pairs)
    p = make_project(tmp_path, ["cache", "xla"])
    opts = BisectOptions(symptom=Verdict.SLOWDOWN, strategy="ablation", timing_replays=2)
    doc = bisect(p, opts, runner=FakeRunner(slow("xla", 1.6))).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"])
    t = doc["timing"]
    assert not t["fast"] and t["p_value"] <= 0.05 and t["new_pairs"] >= 2
    assert len(t["pairs"]) >= 5 + t["new_pairs"]


def test_a_vs_a_is_not_a_slowdown_and_costs_few_trials(tmp_path):
    p = make_project(tmp_path, FEATS)
    res = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(slow("nothing", 1.0)))
    d = res.to_dict()
    assert res.status == "none" and d["timing"]["conclusive"] and d["timing"]["fast"]
    assert d["trials"] <= 6


def test_a_timing_trial_that_runs_past_steps_is_judged_on_its_first_steps(tmp_path):
    # the failing configuration goes NaN at step 30 of a 60-step timing trial:
    # past the 20 `steps` a trial runs for nan and mismatch, so not a NaN
    p = make_project(tmp_path, ["cache", "xla"], steps=20)
    fast = slow("xla", 3.0)

    def behave(cfg, r):
        out = fast(cfg, r)
        if r >= 100 and "xla" in cfg:
            out["losses"] = tuple(1.0 for _ in range(29)) + (math.nan,)
            out["first_nonfinite_step"] = 30
        return out

    doc = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(behave)).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"])


def test_on_a_shared_machine_a_clear_slowdown_takes_two_pairs(tmp_path):
    p = make_project(tmp_path, ["cache", "xla"])
    loaded = slow("xla", 3.0)

    def behave(cfg, r):
        return {**loaded(cfg, r), "extra": {"others_cpu": 0.6}}

    doc = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(behave)).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"])
    t = doc["timing"]
    # two clear pairs in the search, one more in the replay
    assert t["fast"] and len(t["pairs"]) == 3 and not any(x["quiet"] for x in t["pairs"])


def test_a_bystander_kept_by_one_unlucky_timing_pair_is_dropped_in_the_replay(tmp_path):
    """The first timing trial of the culprit alone comes out fast (a noise
    burst on the baseline side, say): the search then keeps the bystander in
    a pair. The replay checks each culprit's necessity again with fresh pairs
    and names the culprit alone."""
    from tfrepro.trials.timing import TIMING_CANDIDATE

    honest = slow("xla", 1.6)

    def behave(cfg, r):
        out = honest(cfg, r)
        if set(cfg) == {"xla"} and r == TIMING_CANDIDATE:  # the unlucky first pair
            out = slow("xla", 1.0)(cfg, r)
        return out

    p = make_project(tmp_path, ["cache", "xla"])
    doc = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(behave)).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"]), doc.get("error")


def loaded_machine(behave, others: float):
    def run(cfg, r):
        return {**behave(cfg, r), "extra": {"others_cpu": others}}

    return run


@pytest.mark.parametrize("culprit", FEATS)
def test_a_7x_culprit_among_6_on_a_loaded_machine_in_at_most_16_trials(tmp_path, culprit):
    # other processes use half the CPUs in every trial: a 7.8x step is more
    # than that load explains (decided on one pair), and a search's "not
    # slower" is taken on one clear pair (halving tests its answer anyway)
    p = make_project(tmp_path, FEATS)
    doc = bisect(p, BisectOptions(), runner=FakeRunner(loaded_machine(slow(culprit, 7.8), 0.5))).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", [culprit])
    assert doc["trials"] <= 16, doc["trials"]


def test_a_search_fooled_into_not_slower_still_ends_on_the_culprit(tmp_path):
    # the first look at the half holding the culprit comes out as fast as
    # the baseline (a fluke); halving goes the wrong way, its answer fails
    # its own test, and ddmin takes over: more trials, the same culprit
    p = make_project(tmp_path, FEATS)
    base = slow("cache", 3.0)
    fooled = frozenset({"cache", "csv_logger", "early_stopping"})

    def behave(cfg, r):
        got = base(cfg, r)
        if frozenset(cfg) == fooled and r == 100:
            return slow("none", 1.0)(cfg, r)
        return got

    doc = bisect(p, BisectOptions(), runner=FakeRunner(behave)).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["cache"])
    seen = [r for r in timing_rows(doc) if r["role"] == "timing" and frozenset(r["enabled"]) == fooled]
    assert seen and seen[0]["repeat"] == 100  # the fluke was really seen


def test_a_search_half_a_little_slower_is_cleared_on_three_pairs_not_five(tmp_path):
    # `cache` makes steps 1.19x slower: under the 1.25 threshold but never a
    # clear-cut pair (> 1.125x; little noise here); the search takes "not
    # slower" from the rank test at p = 1/8 (3 pairs), where the symptom
    # decision would need 5 (p = 1/32)
    p = make_project(tmp_path, FEATS)
    base = slow("xla", 3.0, cv=0.005)

    def behave(cfg, r):
        got = base(cfg, r)
        if "cache" in cfg:
            got = {**got, "step_times": got["step_times"][:3] + tuple(x * 1.19 for x in got["step_times"][3:])}
        return got

    doc = bisect(p, BisectOptions(), runner=FakeRunner(behave)).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"])
    half = [
        r
        for r in timing_rows(doc)
        if r["role"] == "timing" and r["enabled"] == ["cache", "csv_logger", "early_stopping"]
    ]
    assert [r["verdict"] for r in half] == ["ok"] * 3


def test_a_broken_first_baseline_makes_the_pair_untestable_before_the_candidate_runs():
    """trials/timing.TimingPool, shared by the engine, the range modes and the
    report's re-run: a baseline timing trial that crashed anchors no pair,
    the candidate is not run for nothing, and the reason is kept."""
    from tfrepro.trials.timing import TIMING_BASELINE, TimingPool

    calls = []

    def trial(key, repeat, role):
        calls.append((key, repeat, role))
        return TrialResult(crashed=True, exit_code=1, error="ValueError: boom", mode="fit")

    pool = TimingPool(trial, lambda _k, _r: Verdict.OK, 1.25, steps=10)
    out = pool.timed(frozenset({"xla"}))
    assert out.stopped is Verdict.UNTESTABLE and out.pairs == ()
    assert calls == [(frozenset(), TIMING_BASELINE, "timing-baseline")]
    assert pool.why == ["the baseline's timing run stopped with crash"]


@pytest.mark.parametrize("nan_step, stop", [(12, None), (10, Verdict.UNTESTABLE)])
def test_a_baseline_timing_run_is_broken_by_a_nan_only_within_steps(nan_step, stop):
    """One rule for both sides of a pair (trials/timing.stopped), in every
    mode and the report's re-run: a timing run goes on past `steps` (10
    here), and a NaN after them is not the hunted symptom; the engine's pool
    used to reject a baseline timing run that went NaN at any step."""
    from tfrepro.trials.slowdown import SequentialPolicy
    from tfrepro.trials.timing import TimingPool

    def trial(key, repeat, role):
        if key:  # the candidate: finite throughout
            return TrialResult(losses=(1.0,) * 20, step_times=(0.01,) * 20, steps_run=20, mode="fit")
        losses = (1.0,) * (nan_step - 1) + (math.nan,)
        return TrialResult(losses=losses, step_times=(0.01,) * 20, first_nonfinite_step=nan_step, mode="fit")

    pool = TimingPool(trial, lambda _k, _r: Verdict.OK, 1.25, steps=10)
    out = pool.timed(frozenset({"xla"}), SequentialPolicy(min_samples=1, max_samples=3))
    assert out.stopped is stop
    assert (pool.why, len(out.pairs) > 0) == (
        ([], True) if stop is None else (["the baseline's timing run stopped with nan"], False)
    )


def test_a_bystander_that_costs_a_little_is_not_blamed_for_a_13x_slowdown(tmp_path):
    """Journey J15 (AVX2 Zen 1): halving tested the bystander's half first; it
    costs 1.3x, over the 1.25 threshold, so the search went into it and the
    13x cause was never timed alone. A subset shows the failing
    configuration's slowdown only when it explains a large share of it."""
    p = make_project(tmp_path, FEATS)
    # halving's first half is cache, csv_logger, early_stopping
    runner = FakeRunner(slow_many({"cache": 1.3, "xla": 13.0}, cv=0.01))
    doc = bisect(p, BisectOptions(), runner=runner).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["xla"]), (doc["status"], doc["culprits"])


def test_two_independent_2x_costs_still_end_on_one_verified_culprit(tmp_path):
    # together 4x: each explains half of it, so either is a right answer
    p = make_project(tmp_path, FEATS)
    runner = FakeRunner(slow_many({"cache": 2.0, "xla": 2.0}, cv=0.01))
    doc = bisect(p, BisectOptions(), runner=runner).to_dict()
    assert doc["status"] == "found" and doc["culprits"] in (["cache"], ["xla"]), (doc["status"], doc["culprits"])


def test_an_interacting_pair_keeps_both_when_one_alone_costs_a_little(tmp_path):
    # `cache` alone 1.3x, `xla` alone nothing, both together 10x: the replay's
    # necessity check must not drop `xla` because `cache` alone is over 1.25x
    p = make_project(tmp_path, FEATS)
    base = slow_many({"cache": 1.3}, cv=0.01)

    def behave(cfg, r):
        got = base(cfg, r)
        if {"cache", "xla"} <= set(cfg):
            got = {**got, "step_times": got["step_times"][:3] + tuple(x * 10 / 1.3 for x in got["step_times"][3:])}
        return got

    doc = bisect(p, BisectOptions(), runner=FakeRunner(behave)).to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["cache", "xla"]), (doc["status"], doc["culprits"])


def test_a_timing_trial_killed_for_memory_stops_the_timing_as_in_range_mode(tmp_path):
    """One timing stop for both modes (`ends.timing_stop`): an out-of-memory
    kill of a timing trial is no sample (feature mode took its steps as one);
    a slowdown asked for that could not be timed is untestable (`ends.untimed`,
    range mode's rule: feature mode answered none)."""
    behave = slow("xla", 3.0)

    def killed(cfg, r):
        got = behave(cfg, r)
        return {**got, "crashed": True, "exit_code": -9} if "xla" in cfg and 100 <= r < 10_000 else got

    p = make_project(tmp_path, FEATS)
    doc = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(killed)).to_dict()
    assert doc["timing"]["verdict"] == "memory", doc["timing"]
    assert doc["status"] == "untestable" and doc["reason"] == "the failing configuration could not be timed (memory)"
