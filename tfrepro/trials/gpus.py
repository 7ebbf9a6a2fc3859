"""GPUs per trial: how many a trial needs, and which free ones it gets.

`[trial] gpus = N | "all"` says how many GPUs a trial gets; unset, a project
with a distribution feature (a catalog entry of kind "strategy":
MirroredStrategy, multi-worker, TPU, ...) gets every visible GPU, any other
one GPU. The same count for every trial of a project, whatever features are
on: a baseline and its candidate then run on the same kind of machine, and
the count is part of the cache key (it changes the replicas).

`assign` is the pure allocator: given the visible GPUs, those busy and a
need, the lowest free ids that cover it, or None (wait). `GpuPool` hands out
disjoint sets to concurrent trials in arrival order (first come, first
served: a trial needing every GPU is not starved by smaller ones overtaking
it, and runs alone). Trials are pinned with `CUDA_VISIBLE_DEVICES` (an unkeyed
env: any GPU of the box gives the same trial).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from tfrepro import catalog

DISTRIBUTION_KIND = "strategy"


def distribution_features(feature_names: Iterable[str]) -> list[str]:
    """The features that distribute training over devices (catalog kind "strategy")."""
    return sorted(n for n in feature_names if catalog.kind_of(n) == DISTRIBUTION_KIND)


def gpus_needed(setting: int | str | None, feature_names: Iterable[str], visible: Sequence[str]) -> int:
    """How many of the `visible` GPUs one trial gets (see the module docstring);
    a count above what exists is capped at all of them."""
    n = len(visible)
    if n == 0:
        return 0
    if setting is None:
        return n if distribution_features(feature_names) else 1
    if setting == "all":
        return n
    return max(0, min(int(setting), n))


def assign(devices: Sequence[str], busy: Iterable[str], need: int) -> tuple[str, ...] | None:
    """The first `need` free devices (in `devices` order), or None when fewer
    are free. need 0 gets () (no GPU: `CUDA_VISIBLE_DEVICES` empty)."""
    if need > len(devices):
        raise ValueError(f"a trial needs {need} GPUs, only {len(devices)} exist")
    taken = set(busy)
    free = [d for d in devices if d not in taken]
    return tuple(free[:need]) if len(free) >= need else None


class GpuPool:
    """Thread-safe `assign` for concurrent trials, first come first served."""

    def __init__(self, devices: Sequence[str]) -> None:
        self.devices = list(devices)
        self._busy: set[str] = set()
        self._cond = threading.Condition()
        self._next = 0  # ticket being served
        self._issued = 0

    def acquire(self, need: int) -> tuple[str, ...]:
        with self._cond:
            ticket, self._issued = self._issued, self._issued + 1
            self._cond.notify_all()  # one more waiting (`_issued - _next`: tests wait on it)
            while True:
                got = assign(self.devices, self._busy, need) if ticket == self._next else None
                if got is not None:
                    self._busy.update(got)
                    self._next += 1
                    self._cond.notify_all()
                    return got
                self._cond.wait()

    def release(self, ids: Iterable[str]) -> None:
        with self._cond:
            self._busy.difference_update(ids)
            self._cond.notify_all()
