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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tfrepro.trials.ddmin import _split, ddmin  # noqa: F401  (the pure ddmin, shared with report)
from tfrepro.verdicts import Verdict

Config = frozenset[str]
TestBatch = Callable[[list[Config]], list[Verdict]]


class Oracle:
    """Cached, batched, symptom-locked access to a test function.

    `batch_size` is how many configurations the executor can usefully run at
    once; `first_failing` asks for that many at a time so that a serial
    executor (batch_size 1) stops at the first failure instead of paying for
    the whole batch. `test_final`, when given, tests one configuration whose
    failure ends the search (`first_failing(..., final=True)`: ddmin's last
    pair), one at a time: the executor's spare slots run the trial that
    answer needs next (its replay) rather than a sibling the search may not
    need.
    """

    def __init__(
        self,
        test_batch: TestBatch,
        target: Verdict,
        *,
        batch_size: int = 1,
        known: dict[Config, Verdict] | None = None,
        test_final: Callable[[Config], Verdict] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._test_batch = test_batch
        self.target = target
        self.batch_size = batch_size
        self.cache: dict[Config, Verdict] = dict(known or {})
        self.tested: list[tuple[Config, Verdict]] = []  # in test order, cache misses only
        self.test_final = test_final

    @property
    def calls(self) -> int:
        """How many configurations were actually tested (cache misses)."""
        return len(self.tested)

    def verdicts(self, configs: Sequence[Config], test: TestBatch | None = None) -> list[Verdict]:
        """Verdicts of all `configs`, testing the unknown ones in one batch (of `test`: `test_batch` unless given)."""
        todo = list(dict.fromkeys(c for c in map(frozenset, configs) if c not in self.cache))  # in order, once
        if todo:
            got = (test or self._test_batch)(todo)
            if len(got) != len(todo):
                raise RuntimeError("test_batch returned a wrong number of verdicts")
            for c, v in zip(todo, got):
                self.cache[c] = v
                self.tested.append((c, v))
        return [self.cache[frozenset(c)] for c in configs]

    def fails(self, config: Iterable[str]) -> bool:
        return self.verdicts([frozenset(config)])[0] == self.target

    def first_failing(self, configs: Sequence[Config], *, final: bool = False) -> int | None:
        """Index of the first failing configuration in order, testing at most
        `batch_size` unknown ones at a time (`final` with `test_final`: one
        at a time, through it); None when none fails."""
        test, size = None, self.batch_size
        if final and (one := self.test_final) is not None and size > 1:
            test, size = (lambda cs: [one(c) for c in cs]), 1
        i = 0
        while i < len(configs):
            # Grow the window until it holds batch_size unknown configs, so
            # cached ones never waste a slot of the batch.
            j, unknown = i, 0
            while j < len(configs) and (unknown < size or frozenset(configs[j]) in self.cache):
                unknown += frozenset(configs[j]) not in self.cache
                j += 1
            window = configs[i:j]
            for k, v in enumerate(self.verdicts(window, test)):
                if v == self.target:
                    return i + k
            i = j
        return None


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
