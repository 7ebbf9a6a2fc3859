"""Search over feature sets: ablation and delta debugging (pure).

The search knows only configurations (frozensets of feature names) and a
batch test function `test_batch(list[frozenset]) -> list[Verdict]`; it never
starts a process or reads a file, so it is tested in milliseconds with fakes
and reused by any executor. Batches let the executor run independent
configurations in parallel (a round of ablation, the candidates of one delta
debugging step).

Invariants (the pattern of Hypothesis's shrinker):

- Locked onto one symptom: a configuration *fails* when its verdict is the
  hunted `target`, nothing else. A search for a NaN never drifts into chasing
  a crash.
- Outcomes are cached by canonical value (the frozenset): no configuration is
  sent to `test_batch` twice, and the executor may seed known outcomes (the
  baseline and the failing configuration, checked before any search).
- `ddmin` returns a failing, 1-minimal subset: it fails, and removing any one
  of its items makes the failure disappear (every such removal was tested).
  Chunks are deleted in halving sizes, so a single culprit among N items costs
  about 2*log2(N) tests at most (1.5*log2(N) on average when run one by one).
- `halving` is the cheaper search for tests that run one at a time: one
  test per round, the other half inferred, the answer always tested, ddmin
  as the fallback when an inference was wrong (an interaction).
- Replay is the caller's business (it needs fresh runs); `judge_replay` is the
  pure rule that turns replay observations into "found" or "flaky".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tfrepro.trials.ddmin import Config, Oracle, _split, ddmin  # noqa: F401  (the pure ddmin and its oracle, shared with report)
from tfrepro.verdicts import Verdict


def ablation(features: Iterable[str], oracle: Oracle) -> dict[str, Verdict]:
    """Each feature alone (every other one off, as in the baseline): every
    feature's individual effect, in one batch."""
    names = sorted(features)
    return dict(zip(names, oracle.verdicts([frozenset({f}) for f in names])))


def halving(items: Iterable[str], oracle: Oracle, *, fixed: Config = frozenset()) -> Config:
    """Optimistic binary search for one culprit, verified, with ddmin behind it.

    Each round tests only the first half of the current set. When that half
    fails the search goes on inside it; when it does not, the second half is
    *assumed* to fail (true whenever one feature alone causes the symptom)
    and the search goes on inside it untested. The answer is always tested:
    a last item the search only inferred is run before it is returned. When
    it does not fail, the symptom needs features from both halves (an
    interaction): ddmin takes over from the smallest set seen failing, so the
    guarantees are ddmin's (a failing, 1-minimal subset; ValueError when
    `items | fixed` does not fail). A single culprit among N items costs at
    most ceil(log2 N) + 1 tests, against up to 2*log2(N) for ddmin: the
    search for expensive, one-at-a-time tests (a slowdown's timing pairs).
    """
    current = sorted(set(items))

    def cfg(subset: Iterable[str]) -> Config:
        return frozenset(subset) | fixed

    if not oracle.fails(cfg(current)):
        raise ValueError("halving must start from a failing configuration")
    seen_failing, inferred = current, False
    while len(current) >= 2:
        first, second = _split(current, 2)
        if oracle.fails(cfg(first)):
            current = seen_failing = first
            inferred = False
        else:
            current, inferred = second, True  # not tested
    if inferred and not oracle.fails(cfg(current)):
        return ddmin(seen_failing, oracle, fixed=fixed)
    if oracle.fails(cfg([])):
        return frozenset()
    return frozenset(current)


@dataclass(frozen=True)
class ReplayJudgement:
    """Whether a found answer stands up to repeated runs.

    `reproduction_rate` is the fraction of the culprit configuration's trials
    that showed the symptom (None when it has none)."""

    flaky: bool
    reproduction_rate: float | None
    reason: str = ""


def judge_replay(culprit: Sequence[bool], baseline: Sequence[bool] = ()) -> ReplayJudgement:
    """The replay rule, stated once.

    `culprit` holds, for every trial of the culprit configuration (those the
    search saw and the replays with fresh repeat indices), whether it showed
    the symptom; `baseline` the same for the baseline's trials. The answer
    stands only if every culprit trial shows the symptom and no baseline trial
    does. Anything else means the search took its decisions on outcomes that
    do not repeat, so it may not name a culprit: the failure is flaky, with the
    observed rate. (With `repeats` > 1 the search counts a configuration as
    failing when any repeat fails; that lets it *find* a flaky culprit, but the
    answer is still reported as flaky.)
    """
    rate = (sum(culprit) / len(culprit)) if culprit else None
    missed = sum(1 for t in culprit if not t)
    base_hits = sum(1 for t in baseline if t)
    if not culprit or missed:
        return ReplayJudgement(
            True, rate, f"the culprit configuration did not show it in {missed} of {len(culprit)} runs"
        )
    if base_hits:
        return ReplayJudgement(True, rate, f"the baseline showed it in {base_hits} of {len(baseline)} runs")
    return ReplayJudgement(False, rate)
