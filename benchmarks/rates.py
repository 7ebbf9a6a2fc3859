"""Rates with their exact (Clopper-Pearson) confidence intervals, for every
figure the benchmarks print. Pure Python: the binomial tail, inverted by
bisection (no SciPy on a fresh machine).

    python benchmarks/rates.py 0 100      # 0/100 = 0.0 % [0.0 %, 3.6 %]
"""

from __future__ import annotations

import math
import sys


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    total = 0.0
    for i in range(k + 1):
        total += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * math.log(p)
            + (n - i) * math.log1p(-p)
        )
    return min(1.0, total)


def _solve(f, target: float) -> float:
    """The p in [0, 1] where the increasing f(p) crosses target."""
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval for a rate of k successes in n trials:
    lower is where P(X >= k) = alpha/2, upper where P(X <= k) = alpha/2."""
    if not 0 <= k <= n or n == 0:
        raise ValueError(f"need 0 <= k <= n and n > 0, got {k}/{n}")
    alpha = 1.0 - confidence
    lower = 0.0 if k == 0 else _solve(lambda p: 1.0 - _binom_cdf(k - 1, n, p), alpha / 2)
    upper = 1.0 if k == n else _solve(lambda p: 1.0 - _binom_cdf(k, n, p), 1.0 - alpha / 2)
    return lower, upper


def rate_text(k: int, n: int, confidence: float = 0.95) -> str:
    """'k/n = r % [lo %, hi %]' (95 % exact interval)."""
    lo, hi = clopper_pearson(k, n, confidence)
    return f"{k}/{n} = {100 * k / n:.1f} % [{100 * lo:.1f} %, {100 * hi:.1f} %]"


if __name__ == "__main__":
    print(rate_text(int(sys.argv[1]), int(sys.argv[2])))
