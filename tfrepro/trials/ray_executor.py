"""Trials as Ray tasks: a bisect spread over a cluster (`--executor ray`).

Imported only when asked for (it imports Ray); `tfrepro --help` never loads it.

How one trial runs:
1. the driver goes through `runner.run_trial` as a local trial does (the
   task is its `spawn`): the same cache key, a cache hit returned without
   submitting anything, the same stop at a write outside the trial's dir;
2. the project's files (the user's, unrendered) are packed once per bisect
   into a tar held in Ray's object store (each node fetches it once); a task
   carries only the rendered text of the marked files, the settings and the
   trial's `TrialOptions` whole, as `run_variant` takes it (its env, plugins,
   interpreter), its env joined by the driver's TF_/KERAS_/XLA_/... variables
   (the ones the key covers);
3. the task unpacks them into a temp dir on its node (`trials/ownedtmp.py`:
   a later task sweeps it when its worker is lost) and runs the variant
   with `runner.run_variant` (a process in its own session, timeout, harness:
   the very code of a local trial; tfrepro must be installed on the workers,
   with the same TensorFlow), then returns the result and the logs;
4. the driver writes the logs into a trial dir under `.tfrepro/trials/` and
   the result into the cache, so a local rerun is all cache hits.

Warm or cold: as on this machine, a trial is forked from a warm server
(`trials/warm.py`), here one held by the Ray worker that runs the task and
reused by its later tasks, unless it runs cold: its `TrialOptions.cold`, or
`warm.COLD` in the driver (the CLI's `--cold`), which no worker sees
by itself: the switch travels with the task. The result says which
(`extra["process"]`).

Resources: one GPU per task when the cluster has GPUs, else one CPU. A timing
trial is pinned to one node (the same for every timing trial of the run) and
takes every CPU of it on a CPU cluster (one GPU on a GPU cluster), so nothing
else Ray schedules runs beside it on that device.

Failures: the task runs with Ray's own retries off; a lost worker, a dead
node or a task that raised is tried once more, then the trial "could not
run" (`executor_base.could_not_run`: never cached, UNTESTABLE). A trial that
crashes or times out is a measurement, not a failure of the task.
"""

from __future__ import annotations

import io
import socket
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tfrepro.settings import TrialSettings
from tfrepro.trials import ownedtmp, runner, warm
from tfrepro.trials.executor_base import Executor, could_not_run, retry_once
from tfrepro.trials.ray_connect import Connection, connect
from tfrepro.trials.state import LOGS
from tfrepro.trials.trial import Trial, TrialOptions
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project

# Set by the tests' planted projects and by the task: which attempt this is.
ATTEMPT_ENV = "TFREPRO_RAY_ATTEMPT"


@dataclass(frozen=True)
class Shipped:
    """What a task sends back: the trial's result, its logs, where it ran."""

    result: TrialResult
    logs: Mapping[str, bytes]
    node: str | None
    host: str


@ray.remote(max_retries=0, retry_exceptions=False)
def _trial_task(base: bytes, rendered: dict[str, str], settings: TrialSettings, how: TrialOptions) -> Shipped:
    """One trial on a worker: unpack, run as `runner.run_variant` runs a
    local trial with `how` (its env, plugins, interpreter, cold), return the
    result, the logs and where it ran."""
    parent = Path(tempfile.gettempdir()) / "tfrepro-ray"
    parent.mkdir(exist_ok=True)
    # owned: a worker lost in a trial cannot clean up, the next task sweeps its dir
    with ownedtmp.owned("task-", str(parent)) as tmp:
        variant, trial_dir = Path(tmp) / "variant", Path(tmp) / "trial"
        with tarfile.open(fileobj=io.BytesIO(base), mode="r") as tar:
            # The "data" filter (Python >= 3.11.4) also refuses links and devices.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            members = [m for m in tar.getmembers() if not (m.name.startswith("/") or ".." in Path(m.name).parts)]
            tar.extractall(variant, members=members, **safe)
        for rel, text in rendered.items():
            (variant / rel).write_text(text, encoding="utf-8", newline="")
        result = runner.run_variant(variant, settings, trial_dir, how)
        logs = {name: (trial_dir / name).read_bytes() for name in LOGS if (trial_dir / name).is_file()}
    return Shipped(result, logs, ray.get_runtime_context().get_node_id(), socket.gethostname())


def is_lost(e: BaseException) -> bool:
    """A failure of the task, not of the training: worth one more try."""
    return isinstance(e, ray.exceptions.RayError) and not isinstance(e, ray.exceptions.TaskCancelledError)


class RayExecutor(Executor):
    """Each trial a Ray task (see the module docstring).

    `address`: an existing cluster (`ray start --head` prints it), joined
    with a timeout; None joins the Ray instance this process already started,
    or starts a private local one (never a cluster found on disk).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        log = log or (lambda text: print(text, file=sys.stderr))
        # the Ray this process started already, else a private local instance or --address (trials/ray_connect.py)
        self._connection = Connection(owns=False) if ray.is_initialized() else connect(address, log)
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        super().__init__(self.gpus or int(resources.get("CPU", 1)))
        self._bases: dict[str, Any] = {}  # project root -> ObjectRef of its packed files
        self._lock = threading.Lock()
        self._timing_node: tuple[str, float] | None = None  # (node id, its CPUs)
        self.attempts = 0  # tasks submitted (retries included)

    # -- scheduling --------------------------------------------------------
    def _base(self, project: "Project") -> Any:
        with self._lock:
            key = str(Path(project.root).resolve())
            if key not in self._bases:
                # Every file of the project as a tar (symlinks followed: large data files
                # are symlinked into local variants, but a remote node needs their bytes).
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w", dereference=True) as tar:
                    for rel in project.files:
                        tar.add(str(Path(project.root) / rel), arcname=rel, recursive=False)
                self._bases[key] = ray.put(buf.getvalue())
            return self._bases[key]

    def _options(self, exclusive: bool) -> dict[str, Any]:
        if not exclusive:
            return {"num_gpus": 1} if self.gpus else {"num_cpus": 1}
        with self._lock:  # the timing node: picked once, the most GPUs (CPUs) of the live nodes
            if self._timing_node is None:
                alive = [n for n in ray.nodes() if n.get("Alive")]
                want = "GPU" if self.gpus else "CPU"
                best = max(alive, key=lambda n: n.get("Resources", {}).get(want, 0))
                self._timing_node = (best["NodeID"], float(best["Resources"].get("CPU", 1)))
            node, cpus = self._timing_node
        strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        return {**({"num_gpus": 1} if self.gpus else {"num_cpus": cpus}), "scheduling_strategy": strategy}

    # -- one trial ---------------------------------------------------------
    def _run(self, project: "Project", request: Trial, exclusive: bool) -> TrialResult:
        def ship(enabled: tuple[str, ...], trial_dir: Path, how: TrialOptions) -> TrialResult:
            # The driver's variables that enter the cache key (a worker has its own; the GPU
            # a task gets is Ray's business: it sets CUDA_VISIBLE_DEVICES on the worker),
            # and the driver's --cold, which no worker sees.
            inherited = {k: v for k, v in runner.keyed_env(None).items() if k != "CUDA_VISIBLE_DEVICES"}
            env, how = {**inherited, **(how.env or {})}, replace(how, cold=how.cold or warm.COLD)
            args = (self._base(project), project.render(enabled), request.settings)
            options = self._options(exclusive)

            def attempt(n: int) -> Shipped:
                with self._lock:
                    self.attempts += 1
                ref = _trial_task.options(**options).remote(*args, replace(how, env={**env, ATTEMPT_ENV: str(n)}))
                try:
                    return ray.get(ref)
                except KeyboardInterrupt:
                    # KeyboardInterrupt in the task: run_variant kills the trial's process tree.
                    ray.cancel(ref)
                    raise

            out, lost = retry_once(attempt, is_lost)
            if out is None:
                return could_not_run(lost, trial_dir)
            for name, data in out.logs.items():
                (trial_dir / name).write_bytes(data)
            result = out.result
            where = {"executor": "ray", "node": out.node, "host": out.host, "attempts": len(lost) + 1}
            return replace(result, log_dir=str(trial_dir), extra={**result.extra, **where})

        return runner.run_trial(project, request.enabled, request.settings, request.how, spawn=ship)

    def describe(self) -> str:
        kind = f"{self.gpus} GPUs" if self.gpus else f"{self.slots} CPUs"
        return f"ray ({kind}, {self.slots} at a time{', cold processes' if warm.COLD else ''})"

    def close(self) -> None:
        self._connection.close(lambda: ray.is_initialized() and ray.shutdown())
