"""Executors: where a bisect's trials run (this machine, or a Ray cluster).

The search asks for batches of independent trials (a round of ablation, the
subsets of a delta-debugging step) and, for a slowdown, for timing trials one
at a time. An `Executor` runs them and returns their `TrialResult`s; the
engine never knows which executor it has.

- `LocalExecutor`: today's thread pool around `runner.run_trial`, `jobs` wide;
  when GPUs exist, each trial gets the free GPUs it needs (`[trial] gpus`,
  `trials/gpus.py`: disjoint sets, first come first served) through
  `CUDA_VISIBLE_DEVICES`.
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
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tfrepro.errors import UserError
from tfrepro.settings import TrialSettings
from tfrepro.trials.gpus import GpuPool, cuda_env, gpus_needed
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project

EXECUTORS = ("local", "ray")
RAY_INSTALL_HINT = "pip install 'tfrepro[ray]'"
# How many times a lost task is tried again before it counts as "could not run".
RETRIES = 1

T = TypeVar("T")
OnStart = Callable[[int], None]
OnResult = Callable[[int, TrialResult], None]
Runner = Callable[..., TrialResult]


@dataclass(frozen=True)
class TrialRequest:
    """One trial the engine wants: the features ON, how it runs, its label."""

    enabled: tuple[str, ...]
    settings: TrialSettings
    label: str = ""
    use_cache: bool = True
    state_dir: Path | None = None  # None: the project's `.tfrepro`
    # The project to run, when it is not the batch's (commit mode: one per commit).
    project: Any = field(default=None, compare=False)
    # More keywords for the trial runner (version mode: `python`, `versions`, `env`).
    options: dict[str, Any] = field(default_factory=dict, compare=False)


class Executor:
    """Runs batches of independent trials, `slots` at a time, and timing
    trials alone. Subclasses implement `_run`; `run_batch` is shared."""

    name = "executor"

    def __init__(self, slots: int) -> None:
        self.slots = max(1, int(slots))

    def _run(self, project: "Project", request: TrialRequest, slot: int, exclusive: bool) -> TrialResult:
        raise NotImplementedError

    def run_one(self, project: "Project", request: TrialRequest) -> TrialResult:
        return self._run(project, request, 0, False)

    def run_timed(self, project: "Project", request: TrialRequest) -> TrialResult:
        """A timing trial: alone on its device, on the same node as every other
        timing trial of this executor (the caller never overlaps two)."""
        return self._run(project, request, 0, True)

    def run_batch(
        self,
        project: "Project | None",
        requests: Sequence[TrialRequest],
        *,
        on_start: OnStart | None = None,
        on_result: OnResult | None = None,
    ) -> list[TrialResult]:
        """Run independent trials, `slots` at a time; results in request order.
        `on_start(i)` / `on_result(i, result)` are called from worker threads.
        An exception of one trial is raised after the running ones finished
        (nothing new starts); a KeyboardInterrupt (Ctrl-C) kills the running
        trials' process groups at once and is raised when their threads are
        done: the finished trials are cached, the killed ones are not."""
        free: "queue.SimpleQueue[int]" = queue.SimpleQueue()
        for s in range(self.slots):
            free.put(s)
        stop = threading.Event()
        workers: list[int] = []  # appended from worker threads (a set could change size under a copy)

        def one(i: int) -> TrialResult:
            from tfrepro.trials.procs import TrialStopped

            workers.append(threading.get_ident())
            if stop.is_set():
                raise TrialStopped()
            slot = free.get()
            try:
                if on_start:
                    on_start(i)
                result = self._run(requests[i].project or project, requests[i], slot, False)
            finally:
                free.put(slot)
            if on_result:
                on_result(i, result)
            return result

        if self.slots == 1 or len(requests) <= 1:
            return [one(i) for i in range(len(requests))]
        pool = ThreadPoolExecutor(max_workers=min(self.slots, len(requests)))
        futures = []
        try:
            futures = [pool.submit(one, i) for i in range(len(requests))]
            return [f.result() for f in futures]
        except KeyboardInterrupt:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            self._stop_running(workers, futures)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _stop_running(self, workers: list[int], futures: Sequence) -> None:
        """Kill what the worker threads run until every one of them is done
        (a trial that started while we killed is caught on the next round)."""
        from tfrepro.trials.procs import stop_trials

        while not all(f.done() for f in futures):
            stop_trials(list(workers))
            wait(futures, timeout=0.1)

    def describe(self) -> str:
        return f"{self.name} ({self.slots} at a time)"

    def close(self) -> None:
        """Release what the executor started (a local Ray instance)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- retry once ----------------------------------------------------------------------


def retry_once(
    attempt: Callable[[int], T], is_lost: Callable[[BaseException], bool], retries: int = RETRIES
) -> tuple[T | None, list[str]]:
    """`attempt(n)` for n = 0, 1, ...: a loss (`is_lost`) is tried again
    `retries` times; anything else propagates. Returns (value or None when
    every attempt was lost, the description of each loss)."""
    lost: list[str] = []
    for n in range(retries + 1):
        try:
            return attempt(n), lost
        except Exception as e:
            if not is_lost(e):
                raise
            lost.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}".rstrip(": "))
    return None, lost


def could_not_run(lost: Sequence[str], log_dir: Path | None = None) -> TrialResult:
    """The result of a trial whose every attempt was lost: no verdict on the feature."""
    why = "; ".join(lost) or "no attempt finished"
    return TrialResult(
        could_not_run=True,
        error=f"could not run ({len(lost)} attempts lost): {why}",
        log_dir=str(log_dir) if log_dir else None,
        extra={"attempts": len(lost)},
    )


# -- GPUs ----------------------------------------------------------------------------


def visible_gpus(
    environ: dict[str, str] | None = None, nvidia_smi: Callable[[], str | None] | None = None
) -> list[str]:
    """The GPU ids trials may use, without importing TensorFlow: the parent's
    `CUDA_VISIBLE_DEVICES` when set (empty or -1: none), else `nvidia-smi -L`."""
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        ids = [x.strip() for x in env["CUDA_VISIBLE_DEVICES"].split(",") if x.strip()]
        return [] if not ids or ids[0] == "-1" else ids
    text = (nvidia_smi or _nvidia_smi_list)()
    if not text:
        return []
    return [str(i) for i, _ in enumerate(ln for ln in text.splitlines() if ln.startswith("GPU "))]


def _nvidia_smi_list() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def device_for_slot(devices: Sequence[str], slot: int) -> str:
    """One GPU per worker slot (more slots than GPUs share them round-robin)."""
    return devices[slot % len(devices)]


class LocalExecutor(Executor):
    """Trials in subprocesses of this machine, `jobs` at a time.

    With an injected `runner` (tests, the engine's fakes) each trial is
    `runner(project, enabled, settings, use_cache=, label=)` as before. Without
    one, trials go through `runner.run_trial`, or, when GPUs are visible,
    through the same cache protocol with the slot's GPU pinned (the pinned
    device is kept out of the cache key: any GPU of the box gives the same
    trial)."""

    name = "local"

    def __init__(
        self, jobs: int = 1, *, runner: Runner | None = None, devices: Sequence[str] | None = None, cold: bool = False
    ) -> None:
        super().__init__(jobs)
        self.runner = runner
        self.cold = cold  # every trial in a cold process (`--cold`), never forked from a warm server
        self.devices = list(devices) if devices is not None else ([] if runner else visible_gpus())
        self.pool = GpuPool(self.devices)

    def pinned_env(self, slot: int) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": device_for_slot(self.devices, slot)} if self.devices else {}

    def _run(self, project: "Project", request: TrialRequest, slot: int, exclusive: bool) -> TrialResult:
        kw: dict[str, Any] = {"use_cache": request.use_cache, "label": request.label}
        if request.state_dir is not None:
            kw["state_dir"] = request.state_dir
        kw.update(request.options)
        if self.runner is not None:
            return self.runner(project, request.enabled, request.settings, **kw)
        from tfrepro.trials.runner import run_trial

        if not self.devices:
            return run_trial(project, request.enabled, request.settings, cold=self.cold, **kw)
        return self._on_free_gpus(
            project,
            request,
            lambda env: run_trial(project, request.enabled, request.settings, unkeyed_env=env, cold=self.cold, **kw),
        )

    def _on_free_gpus(
        self, project: "Project", request: TrialRequest, run: Callable[[dict[str, str]], TrialResult]
    ) -> TrialResult:
        """Run with the GPUs the trial needs (`trials/gpus.py`), disjoint from
        every running trial's. A timing trial runs alone, so it gets the
        lowest ids: the same devices for every pair."""
        need = gpus_needed(request.settings.gpus, getattr(project, "feature_names", ()), self.devices)
        ids = self.pool.acquire(need)
        try:
            return run(cuda_env(ids))
        finally:
            self.pool.release(ids)

    def describe(self) -> str:
        gpus = f", GPUs {','.join(self.devices)}" if self.devices else ""
        return f"local ({self.slots} at a time{gpus}{', cold processes' if self.cold else ''})"

    def close(self) -> None:
        """End the warm servers this process started (they die with it anyway)."""
        if self.runner is None:
            from tfrepro.trials import warm

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
    cold: bool = False,
) -> Executor:
    """The executor the user asked for (`--executor`, `--jobs`, `--address`, `--cold`)."""
    if name == "local":
        if address:
            raise UserError("--address needs --executor ray", hint="add --executor ray")
        return LocalExecutor(jobs, runner=runner, cold=cold)
    if name == "ray":
        if not address and not os.environ.get("RAY_ADDRESS"):
            keep_ray_on_loopback()
        try:
            from tfrepro.trials.ray_executor import RayExecutor
        except ImportError as e:
            raise UserError(
                f"--executor ray needs Ray, which is not installed ({e})",
                hint=f"{RAY_INSTALL_HINT}, or run without --executor ray",
            ) from None
        return RayExecutor(address=address, log=log, cold=cold)
    raise UserError(f"unknown executor {name!r}", hint="use local or ray")
