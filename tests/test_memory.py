"""The `memory` symptom, pure parts: the sampler's slope, the classifier on
recorded and fake RSS series (noisy ones included), OOM, the manifest key,
the symptom order. Milliseconds; the real trials are in test_memory_e2e.py."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from tfrepro.errors import UserError
from tfrepro.inside import memory as sampler
from tfrepro.project import Manifest
from tfrepro.settings import SymptomSettings
from tfrepro.trials.classify import decide_memory, is_oom, primary, symptoms
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import SYMPTOM_ORDER, Verdict

MB = 1_000_000
SETTINGS = SymptomSettings()
# Recorded: the healthy example, 30 steps, every feature on (statm, bytes).
HEALTHY = (
    691658752,
    693239808,
    693440512,
    693776384,
    693788672,
    693817344,
    693821440,
    693825536,
    693960704,
    693964800,
    694112256,
    694116352,
    694120448,
    694120448,
    694128640,
    694128640,
    694132736,
    694136832,
    694280192,
    694292480,
    694292480,
    694292480,
    694292480,
    694292480,
    694292480,
    694296576,
    694296576,
    694296576,
    694296576,
    694300672,
)


def trial(series, *, peak=None, device=None, steps=None, **kw) -> TrialResult:
    series = tuple(int(x) for x in series)
    growth, _tau = sampler.steady_growth(list(series))
    return TrialResult(
        losses=(1.0,) * len(series),
        rss_per_step=series,
        peak_rss_bytes=peak or max(series),
        device_peak_bytes=device,
        growth_per_step=growth,
        steps_run=steps or len(series),
        **kw,
    )


def noisy(rng: random.Random, n: int = 50, base: float = 700 * MB, slope: float = 16e3, leak: float = 0.0):
    """Allocator-like RSS: a level, a little drift, gaussian jitter, and
    chunks grabbed and returned now and then."""
    out, chunk = [], 0.0
    for i in range(n):
        if rng.random() < 0.1:
            chunk = rng.choice([0.0, 4 * MB, 8 * MB])
        out.append(base + slope * i + leak * i + rng.gauss(0, 1.5 * MB) + chunk)
    return out


# -- the sampler's pieces -----------------------------------------------------------


def test_theil_sen_ignores_outliers_and_tau_says_how_monotone():
    xs = [float(i) for i in range(20)]
    ys = [3.0 * x for x in xs]
    ys[5] = 1e9
    slope, tau = sampler.theil_sen(xs, ys)
    assert slope == pytest.approx(3.0)
    assert tau > 0.7
    assert sampler.theil_sen(xs, [5.0] * 20) == (0.0, 0.0)


def test_steady_growth_skips_warmup_and_needs_points():
    series = [100 * MB] * 3 + [200 * MB + i * MB for i in range(40)]  # a jump in the warm-up only
    growth, tau = sampler.steady_growth(series)
    assert growth == pytest.approx(MB)
    assert sampler.steady_growth([1, 2, 3]) == (None, 0.0)
    assert sampler.tau_z(tau, 35) > 3


def test_sampler_reads_statm_and_compacts_long_series():
    s = sampler.MemorySampler(max_points=8)
    for _ in range(40):
        s.step()
    assert s.source == "statm"
    assert len(s.series) <= 8 and s.stride == 8 and s.steps == 40
    got = s.result()
    assert got["peak_rss_bytes"] >= max(s.series) > 10 * MB
    assert got["extra"]["memory"]["stride"] == 8


def test_sampler_falls_back_to_getrusage(monkeypatch):
    s = sampler.MemorySampler()
    monkeypatch.setattr(sampler.os, "pread", lambda *a: (_ for _ in ()).throw(OSError("no proc")))
    s.step()
    assert s.source == "getrusage" and s.series[0] == sampler.max_rss()


class _FakeNvml:
    """pynvml with two GPUs that read differently, their readings changing
    over the first three calls (then the third again)."""

    def __init__(self):
        self.util = {0: [90, 90, 90], 1: [30, 50, 40]}
        self.used = {0: [9 * MB] * 3, 1: [3 * MB, 7 * MB, 5 * MB]}
        self.calls = {0: 0, 1: 0}

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("Util", (), {"gpu": self.util[h][min(self.calls[h], 2)]})()

    def nvmlDeviceGetMemoryInfo(self, h):
        got = type("Mem", (), {"used": self.used[h][min(self.calls[h], 2)]})()
        self.calls[h] += 1
        return got


@pytest.mark.parametrize(
    "visible, util, peak",
    [
        ("1", [30, 50, 40], 7 * MB),  # only the trial's GPU; the peak over samples, not the last
        ("0,1", [60, 70, 65], 16 * MB),  # utilisation averaged over its GPUs, memory summed
    ],
)
def test_nvml_samples_the_trials_gpus_at_most_every_interval(monkeypatch, visible, util, peak):
    fake = _FakeNvml()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    now = [100.0]
    monkeypatch.setattr(sampler, "time", SimpleNamespace(monotonic=lambda: now[0]))  # an injected clock
    s = sampler.MemorySampler()
    for t in (100.0, 100.05, 100.1, 100.25, 100.3, 100.5):  # samples at 100, 100.25 and 100.5 (every 0.2 s)
        now[0] = t
        s.step()
    nvml = s.result()["extra"]["nvml"]
    assert nvml["gpu_util"] == util and nvml["memory_used_peak_bytes"] == peak
    assert nvml["every_s"] == sampler.NVML_EVERY_S == 0.2


def test_no_nvml_no_device_fields(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import fails
    s = sampler.MemorySampler()
    s.step()
    got = s.result()
    assert "nvml" not in got["extra"] and got["device_peak_bytes"] is None


# -- the classifier -----------------------------------------------------------------


def test_memory_sits_between_timeout_and_mismatch():
    assert [v.value for v in SYMPTOM_ORDER] == ["nan", "crash", "timeout", "memory", "mismatch", "slowdown"]


def test_the_recorded_healthy_series_is_not_memory():
    base = [trial(HEALTHY), trial(HEALTHY)]
    d = decide_memory(trial([x + 300_000 for x in HEALTHY]), base, 1.5)
    assert not d.shows and d.growth_z is not None


def test_a_leak_of_a_megabyte_and_a_half_per_step_is_memory():
    rng = random.Random(1)
    base = [trial(noisy(rng)), trial(noisy(rng))]
    leak = trial(noisy(rng, leak=1.5 * MB))
    d = decide_memory(leak, base, 1.5)
    assert d.shows and "grows" in d.reason
    assert primary(symptoms(leak, reference=None, settings=SETTINGS, baselines=base)) == Verdict.MEMORY
    # without baselines there is nothing to compare with: no memory verdict
    assert primary(symptoms(leak, reference=None, settings=SETTINGS)) == Verdict.OK


def test_noisy_a_a_pairs_never_show_memory_and_leaks_always_do():
    rng = random.Random(7)
    false = hits = 0
    for _ in range(100):
        base = [trial(noisy(rng)), trial(noisy(rng))]
        false += decide_memory(trial(noisy(rng)), base, 1.5).shows
        hits += decide_memory(trial(noisy(rng, leak=1.5 * MB)), base, 1.5).shows
    assert false == 0
    assert hits == 100


def test_growth_the_baseline_shares_is_subtracted():
    rng = random.Random(3)
    base = [trial(noisy(rng, leak=1.5 * MB)), trial(noisy(rng, leak=1.5 * MB))]
    assert not decide_memory(trial(noisy(rng, leak=1.5 * MB)), base, 1.5).shows


def test_a_jump_in_the_steady_steps_is_not_growth_unless_large_and_monotone():
    flat = [700 * MB] * 50
    one_jump = [700 * MB] * 25 + [704 * MB] * 25  # an allocator chunk: 4 MB over the trial
    assert not decide_memory(trial(one_jump), [trial(flat)], 1.5).shows


def test_peak_ratio_and_device_peak():
    base = [trial([700 * MB] * 20, device=1000 * MB)]
    assert decide_memory(trial([700 * MB] * 20, peak=1100 * MB), base, 1.5).shows is True  # 1.57x
    d = decide_memory(trial([700 * MB] * 20, peak=1000 * MB), base, 1.5)  # 1.43x: close, not shown
    assert not d.shows and d.close
    dev = decide_memory(trial([700 * MB] * 20, device=1600 * MB), base, 1.5)
    assert dev.shows and dev.peak_ratio == pytest.approx(1.6)


def test_close_growth_is_flagged():
    base = [trial([700 * MB + (i % 3) * 10_000 for i in range(50)])]
    limit = 0.01 * 740 * MB / 10
    d = decide_memory(trial([700 * MB + 0.8 * limit * i for i in range(50)]), base, 1.5)
    assert d.close and not d.shows
    d = decide_memory(trial([700 * MB + 1.2 * limit * i for i in range(50)]), base, 1.5)
    assert d.close and d.shows


@pytest.mark.parametrize(
    "error, code, expected",
    [
        ("ResourceExhaustedError: OOM when allocating tensor with shape[1000000,1000]", 1, True),
        ("MemoryError: Unable to allocate 7.45 GiB for an array", 1, True),
        (None, -9, True),
        ("killed by SIGKILL", 137, True),
        ("ValueError: shapes (3,) and (4,) not aligned", 1, False),
        (None, -11, False),
    ],
)
def test_an_oom_kill_is_memory_not_crash(error, code, expected):
    r = TrialResult(crashed=True, error=error, exit_code=code)
    assert is_oom(r) is expected
    shown = symptoms(r, reference=None, settings=SETTINGS)
    assert (Verdict.MEMORY in shown) is expected and (Verdict.CRASH in shown) is not expected


def test_a_timeout_sigkill_is_a_timeout():
    r = TrialResult(timed_out=True, exit_code=-9)
    assert symptoms(r, reference=None, settings=SETTINGS) == {Verdict.TIMEOUT}


def test_result_round_trips_memory_fields():
    r = trial(HEALTHY, device=5 * MB)
    back = TrialResult.from_dict(r.to_dict())
    assert back.rss_per_step == r.rss_per_step and back.device_peak_bytes == 5 * MB
    assert back.growth_per_step == r.growth_per_step


# -- the manifest --------------------------------------------------------------------


def test_memory_threshold_and_trial_gpus_are_read():
    m = Manifest.parse('[trial]\ngpus = "all"\nmemory_limit_mb = 512\n[symptoms]\nmemory = 2\n')
    assert m.symptoms.memory == 2.0 and m.trial.gpus == "all" and m.trial.memory_limit_mb == 512
    assert Manifest.parse("").symptoms.memory == 1.5
    assert Manifest.parse("[trial]\ngpus = 2\n").trial.gpus == 2


@pytest.mark.parametrize(
    "toml",
    [
        "[symptoms]\nmemory = 1\n",
        "[symptoms]\nmemory = 0.5\n",
        "[symptoms]\nmemory = nan\n",
        "[symptoms]\nmemory = inf\n",
        "[symptoms]\nmemory = 1001\n",
        '[symptoms]\nmemory = "x"\n',
        '[trial]\ngpus = "some"\n',
        "[trial]\ngpus = -1\n",
        "[trial]\ngpus = true\n",
        "[trial]\nmemory_limit_mb = 1\n",
    ],
)
def test_bad_memory_settings_are_clear_errors(toml):
    with pytest.raises(UserError):
        Manifest.parse(toml)


def test_a_leak_far_past_its_limit_is_not_marginal_whatever_its_peak_ratio():
    """The bundled memory_callback example (3.2 MB/step over 40 steps of a
    288 MB baseline): the peak is 1.45x, near the 1.5x threshold, but the
    growth is four times its limit, so the signal is decisive, not close;
    a peak near the threshold with no growth stays close."""
    level = 288 * MB
    base = [trial([level + 5_000 * (i % 3) for i in range(40)]) for _ in range(2)]
    leak = trial([level + 3.2 * MB * i for i in range(40)])
    d = decide_memory(leak, base, 1.5)
    assert d.shows and not d.close and 1.36 < d.peak_ratio < 1.5
    flat = trial([1.45 * level + 5_000 * (i % 3) for i in range(40)])
    d = decide_memory(flat, base, 1.5)
    assert d.close and not d.shows
