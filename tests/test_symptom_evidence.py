"""Issue 26: symptom choice by evidence. A memory signal near its threshold
that the repeats do not confirm does not preempt a decisive other symptom;
it stays in also_seen with the command to hunt it."""

from __future__ import annotations

from test_engine import FEATS, FakeRunner, make_project
from test_engine_memory import MB, rss

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.verdicts import Verdict


def _marginal_memory_and(other: dict, *, confirmed: bool):
    """xla: a peak 1.55x the baseline's in the first run (close to 1.5x), 1.3x in
    the extra runs unless `confirmed`; cache: `other` (a decisive symptom)."""

    def behave(cfg, r):
        got = rss()
        if "xla" in cfg:
            ratio = 1.55 if r == 0 or confirmed else 1.3
            got["peak_rss_bytes"] = int(700 * MB * ratio)
        if "cache" in cfg:
            got.update(other)
        return got

    return behave


MISMATCH = {"losses": tuple(3.0 * 0.95**i for i in range(20))}


def test_an_unconfirmed_marginal_memory_signal_does_not_preempt_a_mismatch(tmp_path):
    runner = FakeRunner(_marginal_memory_and(MISMATCH, confirmed=False))
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(strategy="ablation"), runner=runner)
    doc = res.to_dict()
    assert (res.status.value, doc["symptom"], doc["culprits"]) == ("found", "mismatch", ["cache"])
    memory = [s for s in doc["also_seen"] if s["symptom"] == "memory"]
    assert memory and "not confirmed" in memory[0]["hint"] and "--symptom memory" in memory[0]["hint"]
    assert any(r >= 500 for _e, r in runner.executed)  # the repeats that decided it ran


def test_a_confirmed_memory_signal_keeps_its_rank(tmp_path):
    runner = FakeRunner(_marginal_memory_and(MISMATCH, confirmed=True))
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(strategy="ablation"), runner=runner)
    assert (res.symptom.value, res.culprits) == ("memory", ("xla",))


def test_a_leak_that_also_slows_the_steps_is_hunted_as_memory(tmp_path):
    """memory_callback's shape: a callback copying every weight per batch
    grows memory 4 MB/step (2.5x its limit; the peak only 1.4x, near the
    threshold) and doubles the step. The leak is decisive, not marginal, so
    it keeps its rank before the slowdown it causes."""

    def behave(cfg, r):
        if "xla" not in cfg:
            return rss(level=190 * MB)
        return {**rss(leak=4 * MB, level=190 * MB), "step_times": (0.5,) * 3 + (0.04,) * 17}

    res = bisect(make_project(tmp_path, FEATS), BisectOptions(strategy="ablation"), runner=FakeRunner(behave))
    assert (res.status.value, res.symptom.value, res.culprits) == ("found", "memory", ("xla",))


def test_one_symptom_pick_for_every_mode():
    """`ends.pick_symptom`: what feature mode and range mode both lock onto."""
    from tfrepro.bisect.ends import pick_symptom

    both = {Verdict.MEMORY, Verdict.MISMATCH}
    asked: list[str] = []

    def stands(answer: bool):
        return lambda: asked.append("memory") or answer

    assert pick_symptom(both, None, memory_stands=stands(True)) is Verdict.MEMORY
    assert pick_symptom(both, None, memory_stands=stands(False)) is Verdict.MISMATCH
    assert pick_symptom({Verdict.NAN, Verdict.MEMORY}, None, memory_stands=stands(False)) is Verdict.NAN
    assert asked == ["memory", "memory"]  # asked only when memory is the next in line
    assert pick_symptom(both, Verdict.NAN, slower=lambda: True) is None  # asked, not shown: nothing to hunt
    assert pick_symptom(set(), None, slower=lambda: True) is Verdict.SLOWDOWN
    assert pick_symptom({Verdict.CRASH}, Verdict.SLOWDOWN, slower=lambda: False) is None
