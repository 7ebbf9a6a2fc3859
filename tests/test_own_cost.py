"""A custom layer's OFF part is a stand-in that does less work, so the layer
is slower than it by its own compute (keras-io's antirectifier: 1.56x its
Identity on an AVX-512 CPU, a false culprit on a healthy script). Without
--symptom, a slowdown of custom layers alone counts from OWN_COST_SLOWDOWN
(replay.py); `--symptom slowdown` hunts it at the plain threshold. Fakes."""

from __future__ import annotations

from test_engine import FakeRunner, make_project, slow_many, slow_when

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.bisect.replay import OWN_COST_SLOWDOWN
from tfrepro.verdicts import Verdict

FEATS = ["custom_layer_antirectifier", "prefetch", "xla"]


def test_a_custom_layer_slower_than_its_stand_in_by_its_own_work_is_healthy(tmp_path):
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(), runner=FakeRunner(slow_when(FEATS[0], 1.6)))
    doc = res.to_dict()
    assert (res.status.value, res.culprits) == ("none", ())
    assert doc["own_cost"]["features"] == [FEATS[0]] and 1.4 < doc["own_cost"]["ratio"] < OWN_COST_SLOWDOWN
    assert "--symptom slowdown" in doc["reason"]
    from tfrepro.cli.display import answer_lines

    assert answer_lines(res)[0] == f"none: {doc['own_cost']['reason']}"  # the CLI says why


def test_asked_for_it_is_hunted_at_the_plain_threshold(tmp_path):
    res = bisect(
        make_project(tmp_path, FEATS),
        BisectOptions(symptom=Verdict.SLOWDOWN),
        runner=FakeRunner(slow_when(FEATS[0], 1.6)),
    )
    assert (res.status.value, res.symptom.value, res.culprits) == ("found", "slowdown", (FEATS[0],))


def test_a_layer_several_times_slower_and_any_other_feature_are_still_culprits(tmp_path):
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(), runner=FakeRunner(slow_when(FEATS[0], 4.0)))
    assert (res.status.value, res.culprits) == ("found", (FEATS[0],))
    res = bisect(make_project(tmp_path / "b", FEATS), BisectOptions(), runner=FakeRunner(slow_when("prefetch", 1.6)))
    assert (res.status.value, res.culprits) == ("found", ("prefetch",))


def slow_when_all(features, ratio):
    """Slower only when every one of `features` is on (no smaller set is)."""
    base = slow_when("-", 1.0)

    def behave(cfg, r):
        out = base(cfg, r)
        if set(features) <= set(cfg):
            out["step_times"] = out["step_times"][:3] + tuple(t * ratio for t in out["step_times"][3:])
        return out

    return behave


MANY = ["cache", "csv_logger", "prefetch", "shuffle", "xla"]


def test_a_small_slowdown_only_four_features_together_show_is_their_combined_overhead(tmp_path):
    from tfrepro.bisect.replay import COMBINED_FEATURES
    from tfrepro.cli.display import answer_lines

    four = MANY[:COMBINED_FEATURES]
    res = bisect(make_project(tmp_path, MANY), BisectOptions(), runner=FakeRunner(slow_when_all(four, 1.5)))
    doc = res.to_dict()
    assert (res.status.value, res.culprits) == ("none", ())
    assert doc["combined_cost"]["features"] == four and 1.3 < doc["combined_cost"]["ratio"] < OWN_COST_SLOWDOWN
    assert "own_cost" not in doc and "--symptom slowdown" in doc["reason"]
    assert answer_lines(res)[0] == f"none: {doc['combined_cost']['reason']}"
    asked = bisect(
        make_project(tmp_path / "asked", MANY),
        BisectOptions(symptom=Verdict.SLOWDOWN),
        runner=FakeRunner(slow_when_all(four, 1.5)),
    )
    assert (asked.status.value, asked.culprits) == ("found", tuple(four))


def test_three_features_together_or_four_several_times_slower_are_still_culprits(tmp_path):
    three = MANY[:3]
    res = bisect(make_project(tmp_path, MANY), BisectOptions(), runner=FakeRunner(slow_when_all(three, 1.5)))
    assert (res.status.value, res.culprits) == ("found", tuple(three))
    four = MANY[:4]
    res = bisect(make_project(tmp_path / "b", MANY), BisectOptions(), runner=FakeRunner(slow_when_all(four, 4.0)))
    assert (res.status.value, res.culprits) == ("found", tuple(four))


def test_two_small_costs_that_add_up_past_the_threshold_are_their_combined_overhead(tmp_path):
    """Journey J19 (AMD Zen 3): mixed_precision alone about 1.13x and an
    EarlyStopping callback 1.03x, together 1.30x: no interaction, two costs
    under the threshold that add up. Not a pair of culprits."""
    costs = {"cache": 1.15, "xla": 1.14}
    res = bisect(make_project(tmp_path, MANY), BisectOptions(), runner=FakeRunner(slow_many(costs)))
    doc = res.to_dict()
    assert (res.status.value, res.culprits) == ("none", ()), (res.status.value, res.culprits)
    assert doc["combined_cost"]["features"] == ["cache", "xla"] and "add up" in doc["reason"]
    asked = bisect(
        make_project(tmp_path / "asked", MANY),
        BisectOptions(symptom=Verdict.SLOWDOWN),
        runner=FakeRunner(slow_many(costs)),
    )
    assert (asked.status.value, asked.culprits) == ("found", ("cache", "xla"))


def slow_at_first(features, ratio, first):
    """Slower only when every one of `features` is on, and only in the first
    `first` timing trials of that configuration (the replay's pairs are not):
    a combined overhead that comes and goes with the load (journey J29:
    `healthy`, seven features together x1.24, answered `flaky`)."""
    from tfrepro.trials.timing import TIMING_CANDIDATE

    base = slow_when("-", 1.0)

    def behave(cfg, r):
        out = base(cfg, r)
        if set(features) <= set(cfg) and r < TIMING_CANDIDATE + first:
            out["step_times"] = out["step_times"][:3] + tuple(t * ratio for t in out["step_times"][3:])
        return out

    return behave


def test_a_combined_overhead_that_does_not_repeat_is_none_not_flaky(tmp_path):
    """Four or more features together under the "several times slower"
    bound are no defect even when the slowdown repeats; when it does not
    (the replay's fresh pairs are not slower), the answer is `none` with the
    same reason, not a flaky slowdown of a healthy script."""
    options = BisectOptions(timing_replays=3)  # fresh pairs enough to overturn the first five
    res = bisect(make_project(tmp_path, MANY), options, runner=FakeRunner(slow_at_first(MANY, 1.5, 5)))
    doc = res.to_dict()
    assert (res.status.value, res.culprits) == ("none", ()), (res.status.value, res.error)
    assert doc["combined_cost"]["features"] == MANY and "did not repeat" in doc["reason"]
    assert "--symptom slowdown" in doc["reason"]
    asked = bisect(
        make_project(tmp_path / "asked", MANY),
        BisectOptions(symptom=Verdict.SLOWDOWN, timing_replays=3),
        runner=FakeRunner(slow_at_first(MANY, 1.5, 5)),
    )
    assert asked.status.value == "flaky"  # asked for: hunted at the plain threshold, and it does not repeat


def noisy_part_of_a_combined_cost(features, part, ratio, first):
    """Every one of `features` on: slower by `ratio`, every time (their
    combined overhead). Any other configuration holding `part`: slower only
    in its first `first` timing trials (one noisy pair under load), never in
    the replay's. Journey J31 (`healthy` on an Intel Xeon, seven features
    x1.43): the search ended on `prefetch` alone from one pair, the replay's
    nine fresh pairs were never slower, and the answer was `flaky`."""
    from tfrepro.trials.timing import TIMING_CANDIDATE

    base = slow_when("-", 1.0)

    def behave(cfg, r):
        out = base(cfg, r)
        if set(features) <= set(cfg) or (part in cfg and r < TIMING_CANDIDATE + first):
            out["step_times"] = out["step_times"][:3] + tuple(t * ratio for t in out["step_times"][3:])
        return out

    return behave


def test_a_part_that_never_repeats_leaves_the_combined_overhead_of_the_whole(tmp_path):
    """The search's set of fewer than COMBINED_FEATURES was not slower in any
    of the replay's fresh pairs, while the whole configuration of 4+ features
    is slower under x3 every time: their combined overhead (`none`), not a
    flaky slowdown of the part."""
    behave = noisy_part_of_a_combined_cost(MANY, "prefetch", 1.5, 5)
    res = bisect(make_project(tmp_path, MANY), BisectOptions(timing_replays=3), runner=FakeRunner(behave))
    doc = res.to_dict()
    assert (res.status.value, res.culprits) == ("none", ()), (res.status.value, res.error)
    assert doc["combined_cost"]["features"] == MANY
    assert "prefetch" in doc["reason"] and "--symptom slowdown" in doc["reason"]
    # what was seen, not what was not: no smaller set was timed on this path
    assert "no smaller set" not in doc["reason"] and "not slower in any of the replay's" in doc["reason"]


def test_a_part_slower_in_every_other_run_is_still_named(tmp_path):
    """A part slow in every other run of a 4+ feature script whose whole
    configuration is slower every time: the part's slowdown repeats in the
    replay, so it stays the answer, not the combined overhead of the whole."""
    from tfrepro.trials.timing import TIMING_CANDIDATE

    base = slow_when("-", 1.0)

    def behave(cfg, r):
        out = base(cfg, r)
        if set(MANY) <= set(cfg) or ("prefetch" in cfg and r >= TIMING_CANDIDATE and r % 2 == 0):
            out["step_times"] = out["step_times"][:3] + tuple(t * 1.6 for t in out["step_times"][3:])
        return out

    res = bisect(make_project(tmp_path, MANY), BisectOptions(timing_replays=3), runner=FakeRunner(behave))
    doc = res.to_dict()
    assert "prefetch" in (*res.culprits, *doc.get("suspects", [])), (res.status.value, doc.get("reason"))
    assert "combined_cost" not in doc
