"""benchmarks/rates.py: the exact interval every benchmark rate is quoted with
(known values from the beta quantiles)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("rates", Path(__file__).parents[1] / "benchmarks" / "rates.py")
rates = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rates)


@pytest.mark.parametrize(
    "k,n,lo,hi",
    [(0, 100, 0.0, 0.03622), (10, 10, 0.69150, 1.0), (5, 10, 0.18709, 0.81291), (97, 100, 0.91482, 0.99378)],
)
def test_clopper_pearson_matches_the_beta_quantiles(k, n, lo, hi):
    got = rates.clopper_pearson(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError):
        rates.clopper_pearson(3, 2)
