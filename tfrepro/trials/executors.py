"""Executors: where a bisect's trials run (this machine, or a Ray cluster).

The search asks for batches of independent trials (a round of ablation, the
subsets of a delta-debugging step) and, for a slowdown, for timing trials one
at a time. An `Executor` runs them and returns their `TrialResult`s; the
engine never knows which executor it has.

- `LocalExecutor`: a thread pool around `runner.run_trial`, `jobs` wide, each
  trial pinned to the free GPUs it needs (GPUs below);
- `RayExecutor` (`ray_executor.py`, imported only when asked for): each trial
  a Ray task; see that module.

Invariants every executor keeps:
- results land in the project's trial cache under the key `run_trial` would
  use, so a run on one executor is all cache hits on another;
- `run_timed` never runs two trials at once (the engine asks for timing
  trials one after another) and always on the same node and device kind;
- a trial that could not run (a lost worker, twice) comes back with
  `could_not_run=True`, is never cached and never counts as a verdict on the
  feature (`classify.symptoms` says UNTESTABLE).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tfrepro import catalog
from tfrepro.errors import UserError
from tfrepro.trials import warm
from tfrepro.trials.trial import Executor, Runner, Trial
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project

# -- GPUs ----------------------------------------------------------------------------
# `[trial] gpus = N | "all"` says how many GPUs a trial gets; unset, a project
# with a distribution feature (a catalog entry of kind "strategy":
# MirroredStrategy, multi-worker, TPU, ...) gets every visible GPU, any other
# one GPU. The same count for every trial of a project, whatever features are
# on: a baseline and its candidate then run on the same kind of machine, and
# the count is part of the cache key (it changes the replicas).
#
# `assign` is the pure allocator: given the visible GPUs, those busy and a
# need, the lowest free ids that cover it, or None (wait). `GpuPool` hands out
# disjoint sets to concurrent trials in arrival order (first come, first
# served: a trial needing every GPU is not starved by smaller ones overtaking
# it, and runs alone). Trials are pinned with `CUDA_VISIBLE_DEVICES` (an unkeyed
# env: any GPU of the box gives the same trial).


def distribution_features(feature_names: Iterable[str]) -> list[str]:
    """The features that distribute training over devices (catalog kind "strategy")."""
    return sorted(n for n in feature_names if catalog.kind_of(n) == "strategy")


def gpus_needed(setting: int | str | None, feature_names: Iterable[str], visible: Sequence[str]) -> int:
    """How many of the `visible` GPUs one trial gets (see the GPUs section);
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


def visible_gpus(
    environ: dict[str, str] | None = None, nvidia_smi: Callable[[], str | None] | None = None
) -> list[str]:
    """The GPU ids trials may use, without importing TensorFlow: the parent's
    `CUDA_VISIBLE_DEVICES` when set (empty or -1: none), else `nvidia-smi -L`."""
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        ids = [x.strip() for x in env["CUDA_VISIBLE_DEVICES"].split(",") if x.strip()]
        return [] if not ids or ids[0] == "-1" else ids
    text = (nvidia_smi or _nvidia_smi_list)() or ""
    return [str(i) for i, _ in enumerate(ln for ln in text.splitlines() if ln.startswith("GPU "))]


def _nvidia_smi_list() -> str | None:
    try:  # no nvidia-smi on PATH: FileNotFoundError
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None


class LocalExecutor(Executor):
    """Trials in subprocesses of this machine, `jobs` at a time.

    Each trial is `runner(project, enabled, settings, how=)`: `runner.run_trial`,
    or the one injected (tests' fakes, `--then-features`' release), with the
    GPUs it needs pinned when there are `devices` (by default the visible
    GPUs, none for an injected runner). The pinned device is kept out of the
    cache key: any GPU of the box gives the same trial."""

    def __init__(self, jobs: int = 1, *, runner: Runner | None = None, devices: Sequence[str] | None = None) -> None:
        super().__init__(jobs)
        self.runner = runner
        self.devices = list(devices) if devices is not None else ([] if runner else visible_gpus())
        self.pool = GpuPool(self.devices)

    def _run(self, project: "Project", request: Trial, exclusive: bool) -> TrialResult:
        from tfrepro.trials.runner import run_trial

        run, how = self.runner or run_trial, request.how
        if not self.devices:
            return run(project, request.enabled, request.settings, how=how)
        # With the GPUs the trial needs (GPUs above), disjoint from every running
        # trial's. A timing trial runs alone, so it gets the lowest ids: the same devices for every pair.
        ids = self.pool.acquire(gpus_needed(request.settings.gpus, getattr(project, "feature_names", ()), self.devices))
        try:
            pinned = replace(how, unkeyed_env={"CUDA_VISIBLE_DEVICES": ",".join(ids)})
            return run(project, request.enabled, request.settings, how=pinned)
        finally:
            self.pool.release(ids)

    def describe(self) -> str:
        gpus = f", GPUs {','.join(self.devices)}" if self.devices else ""
        return f"local ({self.slots} at a time{gpus}{', cold processes' if warm.COLD else ''})"

    def close(self) -> None:
        """End the warm servers this process started (they die with it anyway)."""
        if self.runner is None:
            warm.close_default_pool()


def keep_ray_on_loopback() -> None:
    """Make a Ray instance started by this process bind and advertise
    127.0.0.1 instead of the host's address: a local instance has no business
    on the network. Ray reads the switch when it is first imported, so this
    must run before `import ray`; it is not set when joining a cluster, whose
    workers must reach the driver's address."""
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def make_executor(
    name: str = "local",
    *,
    jobs: int = 1,
    address: str | None = None,
    runner: Runner | None = None,
    log: Callable[[str], None] | None = None,
) -> Executor:
    """The executor the user asked for (`--executor`, `--jobs`, `--address`); on
    either, a trial runs cold by `--cold` (`warm.COLD`) or its own `TrialOptions.cold`."""
    if name == "local":
        if address:
            raise UserError("--address needs --executor ray", hint="add --executor ray")
        return LocalExecutor(jobs, runner=runner)
    if name == "ray":
        if not address and not os.environ.get("RAY_ADDRESS"):
            keep_ray_on_loopback()
        try:
            from tfrepro.trials.ray_executor import RayExecutor
        except ImportError as e:
            raise UserError(
                f"--executor ray needs Ray, which is not installed ({e})",
                hint="pip install 'tfrepro[ray]', or run without --executor ray",
            ) from None
        return RayExecutor(address=address, log=log)
    raise UserError(f"unknown executor {name!r}", hint="use local or ray")
