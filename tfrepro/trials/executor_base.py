"""What every executor shares (executors.py, ray_executor.py): the
`Executor` base (its spawner method `_run` takes one `trial.Trial`) with
its batch runner, and the retry of a lost task (a trial whose every attempt
was lost could not run: never cached, never a verdict on the feature)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tfrepro.trials.procs import TrialStopped, stop_trials
from tfrepro.trials.trial import Trial
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project

# How many times a lost task is tried again before it counts as "could not run".
RETRIES = 1

T = TypeVar("T")
OnStart = Callable[[int], None]
OnResult = Callable[[int, TrialResult], None]
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
        on_start: OnStart | None = None,
        on_result: OnResult | None = None,
    ) -> list[TrialResult]:
        """Run independent trials, `slots` at a time; results in request order.
        `on_start(i)` / `on_result(i, result)` are called from worker threads.
        An exception of one trial is raised after the running ones finished
        (nothing new starts); a KeyboardInterrupt (Ctrl-C) kills the running
        trials' process groups at once and is raised when their threads are
        done: the finished trials are cached, the killed ones are not."""
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
