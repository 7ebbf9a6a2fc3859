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
3. the task unpacks them into a temp dir on its node (`trials/state.py`:
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
run" (`trial.could_not_run`: never cached, UNTESTABLE). A trial that
crashes or times out is a measurement, not a failure of the task.

Starting or joining Ray (`connect`), without ever hanging:
- Without `--address` (and no RAY_ADDRESS), a **private** local instance:
  `address="local"` (never the cluster a stale `/tmp/ray/ray_current_cluster`
  names), its own temp dir (removed at the end; `state.owned`, so the
  next private start sweeps it when this process was killed), every address
  127.0.0.1, no dashboard. `executors.keep_ray_on_loopback` has Ray resolve
  "this node" to 127.0.0.1 rather than the host's interface address.
- With `--address`, the address is first probed with a plain TCP connect
  (nothing listening: an error naming it at once), then `ray.init` gets
  `timeout_s`; past it the error names the address and says what to check.
  A private instance is bounded by Ray itself (its node must register
  within 30 s, or `ray.init` raises).
- While Ray starts, a line every `tick_s` says it is still starting.

`connect`'s `init` is injected (tests); it defaults to `ray.init`.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tfrepro.errors import TfreproError, UserError
from tfrepro.settings import TrialSettings
from tfrepro.trials import runner, state, warm
from tfrepro.trials.state import LOGS
from tfrepro.trials.trial import Executor, Trial, TrialOptions, could_not_run, retry_once
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project

CONNECT_TIMEOUT_S = 60.0
TICK_S = 5.0
LOOPBACK = "127.0.0.1"


@dataclass
class Connection:
    """How this process got its Ray: `owns` it (a private instance or a
    connection it made), and the private instance's temp dir, held while
    `owned` (`state.owned`: its close removes the dir and lets it go)."""

    owns: bool
    temp_dir: str | None = None
    owned: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    def close(self, shutdown: Callable[[], None]) -> None:
        if self.owns:
            shutdown()
        self.owned.close()
        self.owns, self.temp_dir = False, None


def host_port(address: str) -> tuple[str, int]:
    """ "ray://h:p", "h:p" -> (h, p); a UserError for anything else."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserError(f"--address {address!r} is not HOST:PORT", hint="e.g. --address 10.0.0.5:6379")
    return host.strip("[]"), int(port)


def probe(address: str, timeout_s: float, connect=socket.create_connection) -> None:
    """A TCP connect to the address, so a dead cluster is named at once."""
    host, port = host_port(address)
    try:
        connect((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise UserError(
            f"no Ray cluster answers at {address} ({e})",
            hint="start it with `ray start --head --port PORT` on the head node, or drop --address "
            "to run on a private local Ray instance",
        ) from None


def _ticking(
    call: Callable[[], Any], what: str, log: Callable[[str], None], tick_s: float, timeout_s: float | None = None
) -> Any:
    """`call()`, a progress line every `tick_s` meanwhile. In this thread (a
    call that starts Ray's processes, which must outlive the thread that
    started them; Ray bounds its own start-up: the node must register within
    30 s), or, given `timeout_s`, in a thread of its own, TimeoutError past
    it: only for a call that starts no process (Ray's children die with the
    thread that started them, PR_SET_PDEATHSIG)."""
    done = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not done.wait(tick_s):
            log(f"ray: {what}... ({time.monotonic() - t0:.0f} s)")

    def body() -> None:
        try:
            answer.set_result(call())
        except BaseException as e:  # handed to the caller's thread
            answer.set_exception(e)

    threading.Thread(target=tick, name="tfrepro-ray-progress", daemon=True).start()
    try:
        if timeout_s is None:
            return call()
        answer: Future = Future()
        threading.Thread(target=body, name="tfrepro-ray-init", daemon=True).start()
        return answer.result(timeout_s)
    finally:
        done.set()


def connect(
    address: str | None,
    log: Callable[[str], None],
    *,
    init: Callable[..., Any] = ray.init,
    timeout_s: float = CONNECT_TIMEOUT_S,
    tick_s: float = TICK_S,
) -> Connection:
    """Join `address` (or RAY_ADDRESS), or start a private local instance."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        log(f"ray: joining the cluster at {address}")
        probe(address, min(timeout_s, 10.0))
        try:
            _ticking(
                lambda: init(address=address, log_to_driver=False), f"connecting to {address}", log, tick_s, timeout_s
            )
        except TimeoutError:
            raise TfreproError(
                f"ray: the cluster at {address} accepted a connection but did not let this process join "
                f"within {timeout_s:.0f} s; check that it runs the same Ray version and that its token "
                "(Ray's token-auth) is known here"
            ) from None
        return Connection(owns=True)
    with contextlib.ExitStack() as owned:  # the temp dir goes at once when Ray does not start
        temp_dir = owned.enter_context(state.owned("tfrepro-ray-"))  # swept by the next start if we are killed
        log("ray: no --address given, starting a private local Ray instance on this machine (127.0.0.1)")
        local = {"address": "local", "include_dashboard": False, "_node_ip_address": LOOPBACK, "_temp_dir": temp_dir}
        _ticking(lambda: init(**local, log_to_driver=False), "starting the local instance", log, tick_s)
        log("ray: the local instance is up")
        return Connection(owns=True, temp_dir=temp_dir, owned=owned.pop_all())


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
    with state.owned("task-", str(parent)) as tmp:
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
        # the Ray this process started already, else a private local instance or --address (`connect`)
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
