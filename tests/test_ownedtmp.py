"""A warm server's temp dir outlives a SIGKILLed owner only until the next
run: the next `make` sweeps the dirs whose owner's lock is free, never one
whose owner lives, never one without a lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tfrepro.trials import ownedtmp

PREFIX = "tfrepro-warm-"


def test_a_killed_owners_dir_is_swept_and_a_live_ones_is_kept(tmp_path):
    root = str(tmp_path)
    live, fd = ownedtmp.make(PREFIX, root)
    # Another process makes one and is killed with it held: no cleanup of ours runs.
    code = (
        "import os, signal, sys; from tfrepro.trials import ownedtmp; "
        f"p, _ = ownedtmp.make({PREFIX!r}, {root!r}); print(p, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL
    dead = child.stdout.strip()
    unlocked = tmp_path / (PREFIX + "old")  # made by an older tfrepro: no lock file, not judged
    unlocked.mkdir()
    assert os.path.isdir(dead)

    newer, fd2 = ownedtmp.make(PREFIX, root)
    assert not os.path.exists(dead)
    assert os.path.isdir(live) and os.path.isdir(newer) and unlocked.is_dir()
    os.close(fd)  # its owner lets go: the next sweep may take it
    assert ownedtmp.sweep(PREFIX, root) == [live]
    os.close(fd2)
