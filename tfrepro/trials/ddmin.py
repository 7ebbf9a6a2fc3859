"""Search over feature sets: ablation, halving and delta debugging (Zeller's
ddmin), pure: the feature search's (`bisect/engine.py`) and the report's
data reduction's (`report/reduce.py`, ddmin over records).

The search knows only configurations (frozensets of names) and an `Oracle`
over a batch test function `test_batch(list[frozenset]) -> list[Verdict]`
(a bool in the report); it never starts a process or reads a file, so it is
tested in milliseconds with fakes and reused by any executor. Batches let the
executor run independent configurations in parallel (a round of ablation,
the candidates of one delta debugging step).

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
  Its last pair goes through `first_failing(configs, final=True)`: the first
  of them to fail is the answer, so an executor with spare slots may run what
  the answer needs next beside it.
- `halving` is the cheaper search for tests that run one at a time: one
  test per round, the other half inferred, the answer always tested, ddmin
  as the fallback when an inference was wrong (an interaction).
- Replay is the caller's business (it needs fresh runs): `bisect/replay.py`
  and its pure rule `judge_replay`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

Config = frozenset[str]
Outcome = object  # what a test says of a configuration: a Verdict (the feature search), a bool (report/reduce.py)
TestBatch = Callable[[list[Config]], Sequence[Outcome]]


class Oracle:
    """Cached, batched, symptom-locked access to a test function.

    `batch_size` is how many configurations the executor can usefully run at
    once; `first_failing` asks for that many at a time so that a serial
    executor (batch_size 1) stops at the first failure instead of paying for
    the whole batch. `test_final`, when given (a test of the same form),
    tests the configurations whose failure ends the search
    (`first_failing(..., final=True)`: ddmin's last pair), one at a time:
    the executor's spare slots run the trial that answer needs next (its
    replay) rather than a sibling the search may not need.
    """

    def __init__(
        self,
        test_batch: TestBatch,
        target: Outcome,
        *,
        batch_size: int = 1,
        known: dict[Config, Outcome] | None = None,
        test_final: TestBatch | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._test_batch = test_batch
        self.target = target
        self.batch_size = batch_size
        self.cache: dict[Config, Outcome] = dict(known or {})
        self.tested: list[tuple[Config, Outcome]] = []  # in test order, cache misses only
        self.test_final = test_final

    @property
    def calls(self) -> int:
        """How many configurations were actually tested (cache misses)."""
        return len(self.tested)

    def verdicts(self, configs: Sequence[Config], test: TestBatch | None = None) -> list[Outcome]:
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
        if final and self.test_final is not None and size > 1:
            test, size = self.test_final, 1
        i = 0
        while i < len(configs):
            # Grow the window until it holds batch_size unknown configs, so
            # cached ones never waste a slot of the batch.
            j, unknown = i, 0
            while j < len(configs) and (unknown < size or frozenset(configs[j]) in self.cache):
                unknown += frozenset(configs[j]) not in self.cache
                j += 1
            for k, v in enumerate(self.verdicts(configs[i:j], test)):
                if v == self.target:
                    return i + k
            i = j
        return None


def _split(items: Sequence[str], n: int) -> list[list[str]]:
    """`n` contiguous chunks of near-equal size (the first ones larger)."""
    k, r = divmod(len(items), n)
    starts = [i * k + min(i, r) for i in range(n + 1)]  # the first r chunks one item larger
    return [list(items[a:b]) for a, b in itertools.pairwise(starts) if b > a]


def ddmin(items: Iterable[str], oracle: Oracle, *, fixed: Config = frozenset()) -> Config:
    """Delta debugging (Zeller's ddmin) from `items`, which must fail.

    The configuration tested for a subset S is `S | fixed` (`fixed` holds
    features kept on throughout, e.g. the `affects_loss` context of a mismatch
    hunt). Returns a failing, 1-minimal subset of `items`; it is empty only
    when `fixed` alone fails. Raises ValueError when `items | fixed` does not
    fail (the caller checks both ends first).
    """
    current = sorted(set(items))
    cfg = fixed.union  # the configuration tested for a subset S: S | fixed
    if not oracle.fails(cfg(current)):
        raise ValueError("ddmin must start from a failing configuration")
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        # For n == 2 the complements are the chunks themselves.
        complements = [] if len(chunks) == 2 else [[x for x in current if x not in set(c)] for c in chunks]
        candidates = chunks + complements
        # With two items left, the first single one that fails is the answer (`final`).
        hit = oracle.first_failing([cfg(c) for c in candidates], final=len(current) == 2)
        if hit is not None:  # a chunk: start over at 2; a complement: one chunk fewer
            current, n = candidates[hit], 2 if hit < len(chunks) else max(n - 1, 2)
        elif n >= len(current):
            break  # every single removal tested: 1-minimal
        else:
            n = min(2 * n, len(current))
    if len(current) == 1 and oracle.fails(cfg([])):
        current = []
    return frozenset(current)


def ablation(features: Iterable[str], oracle: Oracle) -> dict[str, Outcome]:
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
    cfg = fixed.union  # the configuration tested for a subset S: S | fixed
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
        current = seen_failing  # an interaction: ddmin from the smallest set seen failing
    return ddmin(current, oracle, fixed=fixed)  # one item, tested: only whether `fixed` alone fails
