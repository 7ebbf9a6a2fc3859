"""Starting or joining Ray for `--executor ray`, without ever hanging.

- Without `--address` (and no RAY_ADDRESS), a **private** local instance:
  `address="local"` (never the cluster a stale `/tmp/ray/ray_current_cluster`
  names), its own temp dir (removed at the end; `ownedtmp.owned`, so the
  next private start sweeps it when this process was killed), every address
  127.0.0.1, no dashboard. `executors.keep_ray_on_loopback` has Ray resolve
  "this node" to 127.0.0.1 rather than the host's interface address.
- With `--address`, the address is first probed with a plain TCP connect
  (nothing listening: an error naming it at once), then `ray.init` gets
  `timeout_s`; past it the error names the address and says what to check.
  A private instance is bounded by Ray itself (its node must register
  within 30 s, or `ray.init` raises).
- While Ray starts, a line every `tick_s` says it is still starting.

`init` is injected (tests); it defaults to `ray.init`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tfrepro.errors import TfreproError, UserError
from tfrepro.trials import ownedtmp

CONNECT_TIMEOUT_S = 60.0
TICK_S = 5.0
LOOPBACK = "127.0.0.1"


@dataclass
class Connection:
    """How this process got its Ray: `owns` it (a private instance or a
    connection it made), and the private instance's temp dir, held while
    `owned` (`ownedtmp.owned`: its close removes the dir and lets it go)."""

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
    init_kwargs: dict[str, Any] | None = None,
    *,
    init: Callable[..., Any] | None = None,
    timeout_s: float = CONNECT_TIMEOUT_S,
    tick_s: float = TICK_S,
) -> Connection:
    """Join `address` (or RAY_ADDRESS), or start a private local instance."""
    if init is None:
        import ray

        init = ray.init
    kw: dict[str, Any] = {"log_to_driver": False, **(init_kwargs or {})}
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        log(f"ray: joining the cluster at {address}")
        probe(address, min(timeout_s, 10.0))
        try:
            _ticking(lambda: init(address=address, **kw), f"connecting to {address}", log, tick_s, timeout_s)
        except TimeoutError:
            raise TfreproError(
                f"ray: the cluster at {address} accepted a connection but did not let this process join "
                f"within {timeout_s:.0f} s; check that it runs the same Ray version and that its token "
                "(Ray's token-auth) is known here"
            ) from None
        return Connection(owns=True)
    with contextlib.ExitStack() as owned:  # the temp dir goes at once when Ray does not start
        temp_dir = owned.enter_context(ownedtmp.owned("tfrepro-ray-"))  # swept by the next start if we are killed
        log("ray: no --address given, starting a private local Ray instance on this machine (127.0.0.1)")
        local = {"address": "local", "include_dashboard": False, "_node_ip_address": LOOPBACK, "_temp_dir": temp_dir}
        _ticking(lambda: init(**{**local, **kw}), "starting the local instance", log, tick_s)
        log("ray: the local instance is up")
        return Connection(owns=True, temp_dir=temp_dir, owned=owned.pop_all())
