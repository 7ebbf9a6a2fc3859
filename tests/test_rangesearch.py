"""The pure range search: lambdas for tests, properties over random ranges."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrepro.bisect.rangesearch import Mark, bisect_range, exception_type, judge
from tfrepro.verdicts import Verdict


def planted(first_bad: int, untestable: frozenset[int] = frozenset()):
    """A test over integer items: bad from `first_bad` on, skips in `untestable`."""
    calls: list[int] = []

    def fake(i: int) -> Mark:
        calls.append(i)
        if i in untestable:
            return Mark.SKIP
        return Mark.BAD if i >= first_bad else Mark.GOOD

    return each(fake), calls


def each(mark):
    """A round's test from a one-item test (`bisect_range` tests a round at once)."""
    return lambda items: [mark(x) for x in items]


def recorded(test):
    """`test`, recording every (item, mark) in the order it was tested."""
    tried: list[tuple[object, Mark]] = []

    def run(items: list) -> list[Mark]:
        marks = test(items)
        tried.extend(zip(items, marks))
        return marks

    return run, tried


def test_finds_first_bad_in_log2_trials():
    items = list(range(1025))
    test, calls = planted(700)
    test, tried = recorded(test)
    result = bisect_range(items, test)
    assert result.status == "found"
    assert result.first_bad == 700
    assert result.candidates == ()
    # two ends + ceil(log2(1024)) midpoints
    assert len(tried) == len(calls) == 2 + 10
    assert [m for _, m in tried][:2] == [Mark.GOOD, Mark.BAD]


def test_adjacent_ends_need_only_the_ends():
    test, tried = recorded(each(lambda s: Mark.GOOD if s == "good" else Mark.BAD))
    result = bisect_range(["good", "bad"], test)
    assert (result.status, result.first_bad, len(tried)) == ("found", "bad", 2)


def test_skipped_midpoint_tries_a_neighbour_and_still_finds_it():
    items = list(range(9))  # midpoint of the inner 1..7 is 4
    test, calls = planted(6, frozenset({4}))
    test, tried = recorded(test)
    result = bisect_range(items, test)
    assert result.status == "found" and result.first_bad == 6
    assert calls[2] == 4
    assert (4, Mark.SKIP) in tried


def test_skip_next_to_the_boundary_gives_candidates_not_a_guess():
    items = list(range(9))
    # 4 untestable and 3 good, 5 bad: the first bad one is 4 or 5, nobody can tell
    r1 = bisect_range(items, planted(4, frozenset({4}))[0])
    r2 = bisect_range(items, planted(5, frozenset({4, 5}))[0])
    assert r1.status == "ambiguous" and r1.first_bad is None
    assert r1.candidates == (4, 5)
    assert r2.status == "ambiguous" and r2.candidates == (4, 5, 6)


def test_ends_that_are_not_good_and_bad_are_the_callers_bug():
    """The caller judges the ends first (ranges.check_ends answers baseline-fails,
    none, error or untestable for them): ends that do not hold are refused."""
    items = list(range(10))
    for test in (lambda i: Mark.BAD, lambda i: Mark.GOOD, lambda i: Mark.SKIP if i == 9 else Mark.GOOD):
        with pytest.raises(ValueError, match="judged good and bad"):
            bisect_range(items, each(test))


def test_a_range_needs_two_ends():
    with pytest.raises(ValueError):
        bisect_range([1], each(lambda i: Mark.BAD))


def test_each_item_is_tried_once_even_when_everything_skips():
    items = list(range(20))
    test, calls = planted(19, frozenset(range(1, 19)))
    result = bisect_range(items, test)
    assert sorted(calls) == items
    assert result.status == "ambiguous"
    assert result.candidates == tuple(range(1, 20))


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    n=st.integers(min_value=2, max_value=300),
)
def test_right_answer_or_honest_candidates_within_the_bound(data, n):
    first_bad = data.draw(st.integers(min_value=1, max_value=n - 1), label="first_bad")
    inner = list(range(1, n - 1))
    untestable = frozenset(
        data.draw(st.lists(st.sampled_from(inner), unique=True), label="untestable") if inner else []
    )
    test, calls = planted(first_bad, untestable)
    test, tried = recorded(test)
    result = bisect_range(list(range(n)), test)

    if result.status == "found":
        assert result.first_bad == first_bad
    else:
        assert result.status == "ambiguous"
        assert first_bad in result.candidates
        # honest: every candidate but the last one was tried and skipped
        assert set(result.candidates[:-1]) <= untestable
        assert list(result.candidates) == list(range(result.candidates[0], result.candidates[-1] + 1))
    skips = sum(1 for _, m in tried if m is Mark.SKIP)
    assert len(tried) == len(calls) == len(set(calls))
    assert len(tried) <= math.ceil(math.log2(n - 1 if n > 2 else 1)) + skips + 2
    # a skip-free range always gives an exact answer
    if not untestable:
        assert result.status == "found"


# -- a commit's symptoms -> good / bad / skip -------------------------------------------------------------


@pytest.mark.parametrize(
    "shown, target, error, bad_error, mark",
    [
        ({Verdict.NAN}, Verdict.NAN, None, None, Mark.BAD),
        ({Verdict.CRASH}, Verdict.NAN, "SyntaxError: x", None, Mark.SKIP),
        ({Verdict.MISMATCH}, Verdict.NAN, None, None, Mark.GOOD),
        (set(), Verdict.MISMATCH, None, None, Mark.GOOD),
        ({Verdict.NAN}, Verdict.MISMATCH, None, None, Mark.SKIP),
        ({Verdict.CRASH}, Verdict.CRASH, "ValueError: a", "ValueError: b", Mark.BAD),
        ({Verdict.CRASH}, Verdict.CRASH, "ModuleNotFoundError: No module named 'x'", "ValueError: b", Mark.SKIP),
        ({Verdict.TIMEOUT}, Verdict.SLOWDOWN, None, None, Mark.SKIP),
    ],
)
def test_judge_locks_onto_the_hunted_symptom(shown, target, error, bad_error, mark):
    got, reason = judge(frozenset(shown), target, error=error, bad_error=bad_error)
    assert got is mark
    assert (reason is not None) == (mark is Mark.SKIP)


def test_exception_type_reads_the_last_traceback_line():
    assert exception_type("ValueError: x: y") == "ValueError"
    assert exception_type("tensorflow.python.framework.errors_impl.InvalidArgumentError: z") == "InvalidArgumentError"
    assert exception_type("KeyboardInterrupt") == "KeyboardInterrupt"
    assert exception_type(None) is None


@given(n=st.integers(min_value=2, max_value=80), data=st.data(), width=st.integers(min_value=2, max_value=6))
def test_k_ary_rounds_find_the_same_first_bad_item_in_fewer_rounds(n, data, width):
    first_bad = data.draw(st.integers(min_value=1, max_value=n - 1))
    skips = data.draw(st.sets(st.integers(min_value=1, max_value=n - 2), max_size=n // 4)) if n > 2 else set()
    mark = lambda i: Mark.SKIP if i in skips else (Mark.BAD if i >= first_bad else Mark.GOOD)  # noqa: E731
    rounds: list[list[int]] = []

    def many(xs: list[int]) -> list[Mark]:
        rounds.append(xs)
        assert len(xs) <= width
        return [mark(x) for x in xs]

    one = bisect_range(list(range(n)), each(mark))
    test, tried = recorded(many)
    k = bisect_range(list(range(n)), test, width=width)
    assert (k.status, k.first_bad, k.candidates) == (one.status, one.first_bad, one.candidates)
    assert len({x for x, _ in tried}) == len(tried)  # each item tried once
    if not skips:
        import math

        # the ends' round, then each round divides the candidates by width + 1
        assert len(rounds) <= 1 + math.ceil(math.log(max(n - 1, 1), width + 1)) + 1
