"""Delta debugging (Zeller's ddmin), pure: shared by the feature search
(`bisect/search.py`, which re-exports it) and the report's data reduction
(`report/reduce.py`). It knows only sets of strings and an oracle with
`fails(config)` and `first_failing(configs, final=...)` (`final`: the first
of them to fail is the search's answer, so an executor with spare slots may
run what the answer needs next beside it); `SetOracle` is the plain cached
one over a predicate.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

Config = frozenset[str]


class Oracle(Protocol):
    def fails(self, config: Iterable[str]) -> bool: ...

    def first_failing(self, configs: Sequence[Config], *, final: bool = False) -> int | None: ...


class SetOracle:
    """`fails` = a predicate on a set, cached; tested one at a time."""

    def __init__(self, predicate: Callable[[Config], bool]) -> None:
        self.predicate = predicate
        self.cache: dict[Config, bool] = {}

    @property
    def calls(self) -> int:
        return len(self.cache)

    def fails(self, config: Iterable[str]) -> bool:
        c = frozenset(config)
        if c not in self.cache:
            self.cache[c] = bool(self.predicate(c))
        return self.cache[c]

    def first_failing(self, configs: Sequence[Config], *, final: bool = False) -> int | None:
        return next((i for i, c in enumerate(configs) if self.fails(c)), None)


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

    def cfg(subset: Iterable[str]) -> Config:
        return frozenset(subset) | fixed

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
