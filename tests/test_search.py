"""The pure search: ablation and ddmin over feature sets, with fakes."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrepro.bisect.replay import judge_replay
from tfrepro.trials.ddmin import Oracle, ablation, ddmin, halving
from tfrepro.verdicts import Verdict

NAN = Verdict.NAN


def planted(*culprit_sets: set[str], verdict: Verdict = NAN):
    """A fake test: a config fails when it contains any planted set."""
    sets = [frozenset(s) for s in culprit_sets]

    def fake_batch(configs):
        return [verdict if any(s <= c for s in sets) else Verdict.OK for c in configs]

    return fake_batch


def names(n: int) -> list[str]:
    return [f"f{i:02d}" for i in range(n)]


def oracle_for(test_batch, features, *, batch_size=1, target=NAN):
    # The engine checks both ends before searching (mozregression's
    # ensure_good_and_bad) and seeds the cache with them.
    known = {frozenset(): Verdict.OK, frozenset(features): target}
    return Oracle(test_batch, target, batch_size=batch_size, known=known)


def assert_failing_and_1_minimal(result, test_batch, target=NAN):
    assert test_batch([result])[0] == target
    for x in result:
        assert test_batch([result - {x}])[0] != target, f"{x} is not needed"


def test_single_culprit_among_16_costs_at_most_8_trials():
    feats = names(16)
    for culprit in feats:
        tb = planted({culprit})
        o = oracle_for(tb, feats)
        assert ddmin(feats, o) == {culprit}
        assert o.calls <= 8, (culprit, o.calls)


def test_single_culprit_cost_is_logarithmic_for_larger_sets():
    feats = names(64)
    worst = 0
    for culprit in feats:
        o = oracle_for(planted({culprit}), feats)
        assert ddmin(feats, o) == {culprit}
        worst = max(worst, o.calls)
    assert worst <= 2 * math.ceil(math.log2(64))


def test_interacting_pair_is_found_as_a_pair():
    feats = names(10)
    tb = planted({"f02", "f07"})
    assert ddmin(feats, oracle_for(tb, feats)) == {"f02", "f07"}


def test_two_independent_culprits_give_one_of_them():
    feats = names(12)
    tb = planted({"f03"}, {"f09"})
    got = ddmin(feats, oracle_for(tb, feats))
    assert got in ({"f03"}, {"f09"})


def test_locked_onto_the_target_symptom():
    # f01 crashes, f05 goes NaN: hunting NaN must not settle on the crash.
    def tb(configs):
        out = []
        for c in configs:
            out.append(NAN if "f05" in c else Verdict.CRASH if "f01" in c else Verdict.OK)
        return out

    feats = names(8)
    assert ddmin(feats, oracle_for(tb, feats)) == {"f05"}


def test_fixed_context_is_kept_on_and_never_returned():
    # the mismatch needs custom_loop together with lr_warmup (kept as context)
    tb = planted({"custom_loop", "lr_warmup"}, verdict=Verdict.MISMATCH)
    o = Oracle(tb, Verdict.MISMATCH)
    got = ddmin(["custom_loop", "xla", "prefetch"], o, fixed=frozenset({"lr_warmup"}))
    assert got == {"custom_loop"}
    assert all("lr_warmup" in c for c, _ in o.tested)


def test_empty_answer_when_fixed_alone_fails():
    tb = planted({"a"})
    o = Oracle(tb, NAN)
    assert ddmin(["b", "c", "d"], o, fixed=frozenset({"a"})) == frozenset()


def test_ddmin_refuses_a_passing_start():
    with pytest.raises(ValueError):
        ddmin(["a", "b"], Oracle(planted({"z"}), NAN))


def test_no_configuration_is_tested_twice():
    feats = names(9)
    o = oracle_for(planted({"f01", "f04"}, {"f06", "f08"}), feats)
    ddmin(feats, o)
    configs = [c for c, _ in o.tested]
    assert len(configs) == len(set(configs))


def test_batches_respect_batch_size_and_parallel_costs_fewer_rounds():
    feats = names(16)
    seen: list[int] = []
    inner = planted({"f11"})

    def tb(configs):
        seen.append(len(configs))
        return inner(configs)

    o = oracle_for(tb, feats, batch_size=4)
    assert ddmin(feats, o) == {"f11"}
    assert max(seen) <= 4
    assert len(seen) <= 4  # one round per halving


def test_ablation_is_one_batch_with_every_feature():
    feats = names(6)
    seen = []
    inner = planted({"f02"}, {"f03", "f04"})

    def tb(configs):
        seen.append(list(configs))
        return inner(configs)

    table = ablation(feats, Oracle(tb, NAN))
    assert len(seen) == 1 and len(seen[0]) == 6
    assert table == {f: (NAN if f == "f02" else Verdict.OK) for f in feats}


def test_oracle_rejects_wrong_length_answers():
    o = Oracle(lambda cs: [Verdict.OK], NAN)
    with pytest.raises(RuntimeError):
        o.verdicts([frozenset({"a"}), frozenset({"b"})])


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=20),
    data=st.data(),
    batch=st.integers(min_value=1, max_value=4),
)
def test_ddmin_returns_a_failing_1_minimal_set(n, data, batch):
    feats = names(n)
    k = data.draw(st.integers(min_value=1, max_value=3), label="number of culprit sets")
    sets = [
        data.draw(st.sets(st.sampled_from(feats), min_size=1, max_size=min(3, n)), label="culprit set")
        for _ in range(k)
    ]
    tb = planted(*sets)
    o = oracle_for(tb, feats, batch_size=batch)
    got = ddmin(feats, o)
    assert_failing_and_1_minimal(got, tb)
    # bounded: never worse than the quadratic ddmin bound
    assert o.calls <= n * n + 3 * n


@settings(max_examples=100, deadline=None)
@given(n=st.integers(min_value=2, max_value=32), data=st.data())
def test_single_culprit_cost_bound_property(n, data):
    feats = names(n)
    culprit = data.draw(st.sampled_from(feats))
    o = oracle_for(planted({culprit}), feats)
    assert ddmin(feats, o) == {culprit}
    assert o.calls <= 2 * math.ceil(math.log2(n))


class ScriptedFlaky:
    """A fake whose failures do not repeat: each call fails with probability
    `p` from an injected RNG, whatever the configuration."""

    def __init__(self, p: float, seed: int) -> None:
        self.p = p
        self.rng = random.Random(seed)

    def __call__(self, configs):
        return [NAN if self.rng.random() < self.p else Verdict.OK for _ in configs]

    def runs(self, n: int) -> list[bool]:
        return [self(["x"])[0] == NAN for _ in range(n)]


def test_flaky_search_terminates_and_replay_exposes_it():
    feats = names(8)
    flagged = 0
    for seed in range(50):
        fake = ScriptedFlaky(0.5, seed)
        o = oracle_for(fake, feats)
        ddmin(feats, o)  # any answer; must terminate without error
        judgement = judge_replay([True] + fake.runs(3), [False, False] + fake.runs(3))
        flagged += judgement.flaky
    # the answer survives replay only when 6 coin flips all go its way
    assert flagged >= 45


def test_replay_rule():
    stable = judge_replay([True, True, True], [False, False])
    assert not stable.flaky and stable.reproduction_rate == 1.0
    missed = judge_replay([True, False, True], [False])
    assert missed.flaky and missed.reproduction_rate == pytest.approx(2 / 3)
    assert "1 of 3" in missed.reason
    base = judge_replay([True, True], [False, True])
    assert base.flaky and "baseline" in base.reason
    assert judge_replay([], []).flaky


# -- halving: one test per round, the answer always tested -------------------------------


def test_halving_finds_every_single_culprit_in_at_most_log2_plus_one_tests():
    for n in (2, 3, 5, 6, 7, 16, 33):
        feats = names(n)
        bound = math.ceil(math.log2(n)) + 1
        for culprit in feats:
            o = oracle_for(planted({culprit}), feats)
            assert halving(feats, o) == {culprit}
            assert o.calls <= bound, (n, culprit, o.calls)
            assert frozenset({culprit}) in {c for c, _ in o.tested}, "the answer itself was tested"


def test_halving_costs_less_than_ddmin_on_six_features():
    feats = names(6)
    cost_h, cost_d = [], []
    for culprit in feats:
        o = oracle_for(planted({culprit}), feats)
        halving(feats, o)
        cost_h.append(o.calls)
        o = oracle_for(planted({culprit}), feats)
        ddmin(feats, o)
        cost_d.append(o.calls)
    assert max(cost_h) <= 4 < max(cost_d)
    assert sum(cost_h) < sum(cost_d)


def test_halving_falls_back_to_ddmin_on_an_interaction():
    feats = names(8)
    pair = {"f01", "f06"}  # one in each half: no half fails alone
    tb = planted(pair)
    o = oracle_for(tb, feats)
    got = halving(feats, o)
    assert got == pair
    assert_failing_and_1_minimal(got, tb)


def test_halving_with_two_independent_culprits_gives_a_verified_one():
    feats = names(8)
    tb = planted({"f02"}, {"f07"})
    got = halving(feats, oracle_for(tb, feats))
    assert got in ({"f02"}, {"f07"})
    assert_failing_and_1_minimal(got, tb)


def test_halving_keeps_fixed_on_and_refuses_a_passing_start():
    feats = names(5)
    seen = []

    def tb(configs):
        seen.extend(configs)
        return [NAN if {"f03", "ctx"} <= c else Verdict.OK for c in configs]

    o = Oracle(tb, NAN, known={frozenset({"ctx"}): Verdict.OK})
    assert halving(feats, o, fixed=frozenset({"ctx"})) == {"f03"}
    assert all("ctx" in c for c in seen)
    with pytest.raises(ValueError):
        halving(feats, Oracle(planted({"zz"}), NAN))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_halving_returns_a_failing_1_minimal_set(n, data):
    feats = names(n)
    k = data.draw(st.integers(1, 3))
    sets = [set(data.draw(st.lists(st.sampled_from(feats), min_size=1, max_size=3))) for _ in range(k)]
    tb = planted(*sets)
    got = halving(feats, oracle_for(tb, feats))
    assert_failing_and_1_minimal(got, tb)


def test_ddmins_last_pair_goes_one_at_a_time_through_test_final():
    def recording(culprit):
        finals: list = []

        def final(configs):
            finals.extend(configs)
            return planted({culprit})(configs)

        return final, finals

    known = {frozenset("abcd"): NAN}
    # [a, b] passes and [c, d] fails (one batch); in the last pair {c} fails
    # through test_final, and {d}, its sibling, is never tested
    final, finals = recording("c")
    o = Oracle(planted({"c"}), NAN, batch_size=2, known=known, test_final=final)
    assert ddmin("abcd", o) == {"c"}
    assert finals == [frozenset("c")] and frozenset("d") not in o.cache
    # a serial oracle (batch_size 1) has no slot to spare: test_final is not used
    serial = Oracle(planted({"c"}), NAN, known=known, test_final=final)
    assert ddmin("abcd", serial) == {"c"} and finals == [frozenset("c")]
    # when the first of the pair passes, its sibling goes through test_final too
    final, finals = recording("d")
    o = Oracle(planted({"d"}), NAN, batch_size=2, known=known, test_final=final)
    assert ddmin("abcd", o) == {"d"} and finals == [frozenset("c"), frozenset("d")]
