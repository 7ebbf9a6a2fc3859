"""The bisect engine hunting `memory` with a fake runner: picked in its
place in the order, the leaking feature found, OOM in the baseline is
baseline-fails, a close call gets extra runs and the majority decides."""

from __future__ import annotations

from test_engine import FEATS, FakeRunner, make_project

from tfrepro.bisect.engine import BisectOptions, bisect

MB = 1_000_000


def rss(leak: float = 0.0, n: int = 20, level: float = 700 * MB) -> dict:
    series = tuple(int(level + 10_000 * (i % 3) + leak * i) for i in range(n))
    return {"rss_per_step": series, "peak_rss_bytes": max(series), "growth_per_step": leak}


def leaks_with(*needed, leak: float = 3 * MB, also: dict | None = None):
    return lambda cfg, r: {**rss(leak if set(needed) <= cfg else 0.0), **(also or {} if set(needed) <= cfg else {})}


def test_a_leaking_feature_is_found_as_memory(tmp_path):
    runner = FakeRunner(leaks_with("csv_logger"))
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(strategy="ddmin"), runner=runner)
    doc = res.to_dict()
    assert (res.status.value, doc["symptom"], doc["culprits"]) == ("found", "memory", ["csv_logger"])
    assert doc["reproduction_rate"] == 1.0


def test_memory_comes_before_mismatch_and_after_crash(tmp_path):
    mismatch = {"losses": tuple(3.0 * 0.95**i for i in range(20))}
    runner = FakeRunner(
        lambda cfg, r: {**rss(3 * MB if "prefetch" in cfg else 0.0), **(mismatch if "xla" in cfg else {})}
    )
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(), runner=runner)
    assert res.symptom.value == "memory" and res.culprits == ("prefetch",)
    assert any(s["symptom"] == "mismatch" for s in res.to_dict()["also_seen"])
    # --symptom mismatch hunts the other one
    res = bisect(
        make_project(tmp_path / "b", FEATS),
        BisectOptions(symptom=res.symptom.__class__("mismatch")),
        runner=FakeRunner(runner.behave),
    )
    assert res.culprits == ("xla",)


def test_an_oom_in_the_baseline_is_baseline_fails(tmp_path):
    oom = {"crashed": True, "exit_code": 1, "error": "ResourceExhaustedError: OOM when allocating tensor"}
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(), runner=FakeRunner(lambda cfg, r: oom))
    assert res.status.value == "baseline-fails" and res.symptom.value == "memory"


def test_an_oom_kill_of_a_feature_is_memory_not_crash(tmp_path):
    oom = {"crashed": True, "exit_code": -9, "error": "killed by SIGKILL"}
    runner = FakeRunner(lambda cfg, r: {**rss(), **(oom if "cache" in cfg else {})})
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(), runner=runner)
    assert (res.status.value, res.symptom.value, res.culprits) == ("found", "memory", ("cache",))


def test_a_close_peak_gets_extra_runs_and_the_majority_decides(tmp_path):
    # prefetch's peak is 1.45-1.55x the baseline's, alternating by repeat: close every time
    def behave(cfg, r):
        got = rss()
        if "prefetch" in cfg:
            got["peak_rss_bytes"] = int(700 * MB * (1.55 if r % 2 == 0 or r >= 500 else 1.45))
        return got

    runner = FakeRunner(behave)
    res = bisect(make_project(tmp_path, FEATS), BisectOptions(symptom=None, strategy="ablation"), runner=runner)
    assert res.symptom.value == "memory"
    extra = [(e, r) for e, r in runner.executed if r >= 500]
    assert extra and all("prefetch" in e for e, _ in extra)
