"""One trial, as one value from the engine to the process: `Trial` (the
features ON, the settings, `TrialOptions`: how it runs) is what the engine
asks an executor for, what the executor's spawner (`LocalExecutor`: warm or
cold processes; `RayExecutor`: Ray tasks) runs through `runner.run_trial`,
and, with the variant's hash, what the trial cache key is made of
(`runner.trial_key`). Below, what every executor (executors.py,
ray_executor.py) shares: the `Executor` base (its spawner method `_run`
takes one `Trial`) with its batch runner, and the retry of a lost task
(`could_not_run`: executors.py's invariants)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tfrepro.settings import TrialSettings
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project


class Purpose(StrEnum):
    """Why a bisection runs a trial: its role in the run (the trials table's
    `role`, the trial's label, what the progress line says). A range mode's
    trial is a point's ("commit <sha12>", "tf <version>"), no purpose."""

    BASELINE = "baseline"  # every feature OFF, at least twice: the second measures the noise
    PREFLIGHT = "preflight"  # the all-OFF variant again, a feature whose OFF part broke it kept ON
    FAILING = "failing"  # every feature ON
    REFERENCE = "reference"  # only the affects_loss features ON: a mismatch's reference
    SEARCH = "search"
    MEMORY_REPEAT = "memory-repeat"  # more runs of a memory decision near its threshold
    TIMING = "timing"  # a timing trial of a configuration (B C B pairs)
    TIMING_BASELINE = "timing-baseline"  # the shared pool's baseline timing trials
    REPLAY = "replay"
    REPLAY_BASELINE = "replay-baseline"
    REPLAY_WITHOUT = "replay-without"  # the culprit configuration without one culprit
    NAN_STATE = "nan-state"  # a NaN's state before its step, for the report's replay.py


@dataclass(frozen=True)
class TrialOptions:
    """How one trial runs besides its settings: the one value `run_trial`
    and `run_variant` take.
    `env` is part of the cache key; `unkeyed_env` is not (the GPU a trial is
    pinned to: any GPU of the box gives the same trial), nor is `cold` (a
    warm and a cold process give the same trial: tests/test_warm.py).
    `python` runs the trial under another interpreter (a version
    environment), whose `versions` enter the key and the result."""

    use_cache: bool = True
    label: str = ""
    state_dir: Path | None = None  # None: the project's `.tfrepro`
    env: Mapping[str, str] | None = None
    unkeyed_env: Mapping[str, str] | None = None
    plugins: Sequence[Path] = ()
    plugin_options: Mapping[str, Any] | None = None
    python: str | None = None
    versions: Mapping[str, str | None] | None = None
    cold: bool = False


@dataclass(frozen=True)
class Trial:
    """One trial the engine wants: the features ON, its settings, how it
    runs (`how.label`: its role in the run)."""

    enabled: tuple[str, ...]
    settings: TrialSettings
    how: TrialOptions = TrialOptions()
    # The project to run, when it is not the batch's (commit mode: one per commit).
    project: "Project | None" = field(default=None, compare=False)
    # A result known already (version mode's injected trial in tests): nothing runs.
    given: TrialResult | None = field(default=None, compare=False)


# How many times a lost task is tried again before it counts as "could not run".
RETRIES = 1

T = TypeVar("T")
# `runner.run_trial` or a stand-in: (project, enabled, settings, how=TrialOptions) -> TrialResult
Runner = Callable[..., TrialResult]


class Executor:
    """Runs batches of independent trials, `slots` at a time, and timing
    trials alone. Subclasses implement `_run`; `run_batch` is shared."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, int(slots))

    def _run(self, project: "Project", request: Trial, exclusive: bool) -> TrialResult:
        raise NotImplementedError

    def _ran(self, project: "Project", request: Trial, exclusive: bool) -> TrialResult:
        """`request.given` (a result known already: never spawned), else the spawner's."""
        return request.given if request.given is not None else self._run(project, request, exclusive)

    def run_timed(self, project: "Project", request: Trial) -> TrialResult:
        """A timing trial: alone on its device, on the same node as every other
        timing trial of this executor (the caller never overlaps two)."""
        return self._ran(project, request, True)

    def run_batch(
        self,
        project: "Project | None",
        requests: Sequence[Trial],
        *,
        on_start: Callable[[int], None] | None = None,
        on_result: Callable[[int, TrialResult], None] | None = None,
    ) -> list[TrialResult]:
        """Run independent trials, `slots` at a time; results in request order.
        `on_start(i)` / `on_result(i, result)` are called from worker threads.
        An exception of one trial is raised after the running ones finished
        (nothing new starts); a KeyboardInterrupt (Ctrl-C) kills the running
        trials' process groups at once and is raised when their threads are
        done: the finished trials are cached, the killed ones are not."""
        from tfrepro.trials.procs import TrialStopped, stop_trials  # the process side, only where trials run

        stop = threading.Event()
        workers: list[int] = []  # appended from worker threads (a set could change size under a copy)

        def one(i: int) -> TrialResult:
            workers.append(threading.get_ident())
            if stop.is_set():
                raise TrialStopped()
            if on_start:
                on_start(i)
            result = self._ran(requests[i].project or project, requests[i], False)
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
            # Kill what the worker threads run until every one of them is done
            # (a trial that started while we killed is caught on the next round).
            while not all(f.done() for f in futures):
                stop_trials(list(workers))
                wait(futures, timeout=0.1)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Release what the executor started (a local Ray instance)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- retry once ----------------------------------------------------------------------


def retry_once(attempt: Callable[[int], T], is_lost: Callable[[BaseException], bool]) -> tuple[T | None, list[str]]:
    """`attempt(n)` for n = 0, 1, ...: a loss (`is_lost`) is tried again
    `RETRIES` times; anything else propagates. Returns (value or None when
    every attempt was lost, the description of each loss)."""
    lost: list[str] = []
    for n in range(RETRIES + 1):
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
