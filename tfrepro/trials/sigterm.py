"""SIGTERM as Ctrl-C: the one handler of the parent process. Standard
library only, so the CLI's group installs it around every command without
importing the trial machinery (`procs`, `warm`, `confine`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread, so a bisect that
    is terminated cleans up as on Ctrl-C (running trials killed, checkouts
    removed; SIGKILL cannot be caught: the next run removes its leftovers).
    A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
