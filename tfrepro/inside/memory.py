"""Memory and device sampling inside the trial process (Contract 3, `memory`).

Standalone like the harness (stdlib only; TensorFlow and NVML looked up in
sys.modules / imported lazily, never required); loaded by path by harness.py
(module `_tfrepro_memory`). The parent imports it too, for the same robust
slope (`theil_sen`, `steady_growth`), so the harness's `growth_per_step` and
the classifier's are one computation.

What a trial's memory is (Contract 3): its **anonymous resident memory**,
the pages only a process's own allocations create (heap, tensors, NumPy
arrays, thread stacks), `resident - shared` of `/proc/self/statm`: one
`pread` on a kept descriptor, ~5 us per step. Pages mapped from files (the
shared libraries and bytecode of TensorFlow, Keras, NumPy) and shared memory
are left out: a warm child forked from a server that imported TensorFlow
inherits its anonymous pages as a cold process builds the same ones by
importing it (they count alike), while the fork does not copy the page
tables of file mappings, so a forked child shows hundreds of MB less RSS
and then "grows" as it touches the libraries' code again; counting only
anonymous pages gives a warm child and a cold process of the same script
the same peak and the same series (measured on weight_history_memory: RSS
peaks 447 MB warm, 784 MB cold; anonymous 372 MB both). The peak is the
largest per-step reading (and one at the end), not the kernel's high-water
mark, which counts file pages too. Where
there is no statm, `resource.getrusage` max RSS stands in (a high-water
mark: it can only show growth), `source` says so.

At the end, `result()` adds the device's peak
(`tf.config.experimental.get_memory_info` for each GPU TensorFlow sees, only
when it sees one) and, when NVML (`pynvml`, from `nvidia-ml-py`) imports,
GPU utilisation and memory sampled at most every `NVML_EVERY_S` seconds.

Series longer than `MAX_POINTS` are kept at a stride (every k-th step, k a
power of two): `rss_per_step[i]` is then the reading after step (i+1)*k.

`Budget`: a timing trial's step budget (harness.py, when the config has
`steps_max` > 0).

DESIGN: "measure enough steady steps (a time budget, not a fixed 40 steps of
3 ms)". A timing trial ignores `steps` and stops once `min_time_s` of
steady-state steps (past the `warmup` steps) and `min_steps` of them are in,
or at `steps_max` steps, or, for a very slow step, at 5x the time budget with
5 steady steps. It sets REPRO_STEPS=steps_max for the script unless set (the
templates read it), so a project that asks runs long enough.

`timed_calls` (fit#2, fit#3...: the calls the failing configuration showed
slower) limits the budget to those calls' steps, each with its own warm-up
(a later fit traces again); the steady steps timed are listed in the result's
extra as `timed_ranges` ([start, end) step indices), and the trial ends when
the last of them ends. Without it the first call is timed, as before.

It also measures contention: `others_cpu` in the result's extra is the share
of the machine's CPUs that other processes used during the steady steps
(Linux /proc/stat; absent elsewhere), so the classifier can tell a trial
that shared the machine from one that had it to itself.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
import statistics
import sys
import time

MAX_POINTS = 2048
NVML_EVERY_S = 0.2
# Steps at the start that are never "steady" for growth: tracing, the first
# allocations of the optimizer and the input pipeline (and at least a fifth of
# the trial).
GROWTH_WARMUP = 3
MEASURE = {"statm": "anonymous resident", "getrusage": "max RSS"}


def theil_sen(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(median of the pairwise slopes, Kendall's tau of y against x).

    Robust: a few outliers (a GC, the allocator returning a chunk) move
    neither. O(n^2) pairs; callers keep n at a few thousand at most.
    """
    diffs = [(x1 - x0, y1 - y0) for (x0, y0), (x1, y1) in itertools.combinations(zip(xs, ys), 2)]
    diffs = [(dx, dy) for dx, dy in diffs if dx != 0]
    if not diffs:
        return 0.0, 0.0
    tau = sum((dy * dx > 0) - (dy * dx < 0) for dx, dy in diffs) / len(diffs)  # concordant - discordant
    return statistics.median(dy / dx for dx, dy in diffs), tau


def steady_part(series: list[int], stride: int = 1) -> tuple[list[float], list[float]]:
    """(step numbers, RSS) of the steady steps: past `GROWTH_WARMUP` steps and
    past the first fifth of the trial."""
    n = len(series)
    start = max(GROWTH_WARMUP // max(stride, 1), n // 5)
    xs = [float((i + 1) * stride) for i in range(start, n)]
    return xs, [float(y) for y in series[start:]]


def steady_growth(series: list[int], stride: int = 1) -> tuple[float | None, float]:
    """(robust growth in bytes per step over the steady steps, Kendall's tau);
    (None, 0.0) when fewer than 6 steady points."""
    xs, ys = steady_part(series, stride)
    if len(xs) < 6:
        return None, 0.0
    while len(xs) > 512:  # O(n^2): thin out evenly, keeps the slope
        xs, ys = xs[::2], ys[::2]
    return theil_sen(xs, ys)


def tau_z(tau: float, n: int) -> float:
    """Kendall's tau as a z-score under "no trend" (no tie correction)."""
    if n < 3:
        return 0.0
    sd = math.sqrt(2.0 * (2 * n + 5) / (9.0 * n * (n - 1)))
    return tau / sd


class MemorySampler:
    """Per-step RSS and, at the end, the peaks (see the module docstring)."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.series: list[int] = []
        self.stride = 1
        self.max_points = max_points
        self.steps = 0
        self.peak = 0
        self.source = "statm"
        self._fd: int | None = None
        self._pid = -1
        self._nvml = None
        self._nvml_next = 0.0
        self._nvml_util: list[int] = []
        self._nvml_mem_peak = 0

    # -- RSS -------------------------------------------------------------------
    def rss(self) -> int | None:
        """Anonymous resident bytes now (statm: resident - shared), else the
        max RSS so far (getrusage)."""
        if self.source == "statm":
            try:
                if self._fd is None or self._pid != os.getpid():  # a forked worker reopens its own
                    self._fd, self._pid = os.open("/proc/self/statm", os.O_RDONLY), os.getpid()
                fields = os.pread(self._fd, 128, 0).split()
                return (int(fields[1]) - int(fields[2])) * mmap.PAGESIZE
            except (OSError, IndexError, ValueError):
                self.source = "getrusage"
        return max_rss()

    def step(self) -> None:
        self.steps += 1
        value = self.rss()
        if value is not None:
            self.peak = max(self.peak, value)
            if self.steps % self.stride == 0:
                self.series.append(value)
                if len(self.series) > self.max_points:
                    self.series = self.series[1::2]  # keep steps 2k, 4k, ... : stride doubles
                    self.stride *= 2
        now = time.monotonic()  # NVML: at most every NVML_EVERY_S
        if now < self._nvml_next:
            return
        self._nvml_next = now + NVML_EVERY_S
        if self._nvml is None:
            self._nvml = _nvml_sampler() or False
        if self._nvml and (got := self._nvml()) is not None:
            self._nvml_util.append(got[0])
            self._nvml_mem_peak = max(self._nvml_mem_peak, got[1])

    def result(self) -> dict:
        """The fields the harness writes (TrialResult's memory fields + extra)."""
        peak = max(self.peak, self.rss() or 0)  # off statm, rss() is the max RSS so far already
        growth, tau = steady_growth(self.series, self.stride)
        memory = {"source": self.source, "measure": MEASURE[self.source], "stride": self.stride}
        extra: dict = {"memory": {**memory, "growth_tau": round(tau, 4)}}
        # {"GPU:0": peak bytes, ...} from TensorFlow's allocator, if imported (never initialises a device)
        device: dict[str, int] = {}
        tf = sys.modules.get("tensorflow")
        with contextlib.suppress(Exception):
            for i in range(len(tf.config.list_physical_devices("GPU")) if tf is not None else 0):
                with contextlib.suppress(Exception):
                    device[f"GPU:{i}"] = int(tf.config.experimental.get_memory_info(f"GPU:{i}").get("peak", 0))
        if device:
            extra["memory"]["device_peaks"] = device
        if self._nvml:
            extra["nvml"] = {
                "gpu_util": self._nvml_util,
                "memory_used_peak_bytes": self._nvml_mem_peak or None,
                "every_s": NVML_EVERY_S,
            }
        return {
            "peak_rss_bytes": peak or None,
            "rss_per_step": list(self.series),
            "growth_per_step": growth,
            "device_peak_bytes": max(device.values()) if device else None,
            "extra": extra,
        }

    def merge_into(self, result: dict) -> None:
        """Add `result()` to the harness's result dict (non-finite numbers dropped)."""
        got = self.result()
        result.setdefault("extra", {}).update(got.pop("extra"))
        result.update({k: v for k, v in got.items() if not (isinstance(v, float) and not math.isfinite(v))})


def max_rss() -> int | None:
    """The process's RSS high-water mark in bytes (None where unknown)."""
    try:
        import resource

        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError, AttributeError):
        return None
    return int(kb) if sys.platform == "darwin" else int(kb) * 1024


def _nvml_sampler():
    """GPU utilisation (%) and memory used (bytes) of the GPUs this process
    may use (CUDA_VISIBLE_DEVICES when it lists indices, else all), through
    pynvml: a function giving (mean utilisation %, total memory used) over
    them, or None when a reading fails. None when pynvml is missing or finds no GPU."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = list(range(count))
        if wanted is not None:
            with contextlib.suppress(ValueError):  # UUIDs: all devices
                ids = [int(x) for x in wanted.split(",") if x.strip() and int(x) >= 0]
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in ids if i < count]
    except Exception:
        return None

    def sample() -> tuple[int, int] | None:
        try:
            util = [nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
            used = sum(int(nvml.nvmlDeviceGetMemoryInfo(h).used) for h in handles)
        except Exception:
            return None
        return round(sum(util) / len(util)), used

    return sample if handles else None


def start(config: dict) -> MemorySampler:
    """The harness's entry: RLIMIT_AS set for this process and its children
    (`[trial] memory_limit_mb`), a sampler for the trial."""
    if limit_mb := config.get("memory_limit_mb"):
        import resource

        limit = int(limit_mb) * 1024 * 1024
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return MemorySampler()


# -- a timing trial's step budget ------------------------------------------------------


def _cpu_now():
    """(wall s, this process's CPU s, the machine's busy CPU s), or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        t = os.times()
        return time.monotonic(), t.user + t.system, (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class Budget:
    def __init__(self, config: dict) -> None:
        self.steps_max = int(config.get("steps_max") or 0)
        self.min_time_s = float(config.get("min_time_s") or 0.0)
        self.min_steps = int(config.get("min_steps") or 0)
        self.warmup = int(config.get("warmup") or 0)
        self.seen = 0
        self.steady: list[float] = []  # the steady step times (benchmarks replay recorded ones through this)
        self.steady_s = 0.0
        self.cpu0 = _cpu_now() if self.warmup == 0 else None
        os.environ.setdefault("REPRO_STEPS", str(self.steps_max))
        self.timed_calls = list(config.get("timed_calls") or ())
        self.active = not self.timed_calls  # whether the current call is timed
        self.call_seen = 0  # steps of the current call (its own warm-up)
        self.total = 0  # every step of the trial, timed or not
        self.ranges: list[list[int]] = []  # [start, end) of the steady steps timed

    def begin_call(self, tag: str) -> None:
        if self.timed_calls:
            self.active, self.call_seen = tag in self.timed_calls, 0

    def call_ended(self, tag) -> bool:
        """Whether the trial ends with the call `tag` that just ended."""
        return not self.timed_calls or tag == self.timed_calls[-1]

    def step(self, dt: float) -> bool:
        """Count one step; True when the budget is spent (stop the trial)."""
        self.total += 1
        if not self.active:
            return self.total >= self.steps_max
        if self.timed_calls:
            self.call_seen += 1
            if self.call_seen > self.warmup:
                if self.ranges and self.ranges[-1][1] == self.total - 1:
                    self.ranges[-1][1] = self.total
                else:
                    self.ranges.append([self.total - 1, self.total])
        self.seen += 1
        if (self.call_seen if self.timed_calls else self.seen) > self.warmup:
            self.steady.append(dt)
            self.steady_s += dt
        elif self.seen == self.warmup:
            self.cpu0 = _cpu_now()
        steady = len(self.steady)
        return (
            self.total >= self.steps_max
            or (steady >= self.min_steps and self.steady_s >= self.min_time_s)
            or (steady >= 5 and self.steady_s >= 5 * self.min_time_s > 0)
        )

    def finish(self, extra: dict) -> None:
        if self.timed_calls:
            extra["timed_ranges"] = self.ranges
            extra["timed_calls"] = self.timed_calls
        now = _cpu_now()
        if self.cpu0 is None or now is None or now[0] <= self.cpu0[0]:
            return
        wall, ours, busy = (b - a for a, b in zip(self.cpu0, now))
        extra["others_cpu"] = round(max(0.0, busy - ours) / (wall * (os.cpu_count() or 1)), 3)
