"""A timing trial's step budget, inside the trial process (loaded by path by
harness.py when the config has `steps_max` > 0).

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

import os
import time


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
