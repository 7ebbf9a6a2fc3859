"""A warm server's temp dir outlives a SIGKILLed owner only until the next
run: the next `make` sweeps the dirs whose owner's lock is free, never one
whose owner lives, never one without a lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tfrepro.trials import state

PREFIX = "tfrepro-warm-"


def test_a_killed_owners_dir_is_swept_and_a_live_ones_is_kept(tmp_path):
    root = str(tmp_path)
    live, fd = state.make(PREFIX, root)
    # Another process makes one and is killed with it held: no cleanup of ours runs.
    code = (
        "import os, signal, sys; from tfrepro.trials import state; "
        f"p, _ = state.make({PREFIX!r}, {root!r}); print(p, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL
    dead = child.stdout.strip()
    unlocked = tmp_path / (PREFIX + "old")  # made by an older tfrepro: no lock file, not judged
    unlocked.mkdir()
    assert os.path.isdir(dead)

    newer, fd2 = state.make(PREFIX, root)
    assert not os.path.exists(dead)
    assert os.path.isdir(live) and os.path.isdir(newer) and unlocked.is_dir()
    os.close(fd)  # its owner lets go: the next sweep may take it
    assert state.sweep(PREFIX, root) == [live]
    os.close(fd2)


def test_in_use_is_the_lock_alone_and_none_without_one(tmp_path):
    """The one liveness rule (the state dir's records use it too): a held
    lock is in use, in this process as in another; a free one is not,
    whatever pid the dir's name or the lock file holds; no lock file, no
    judgement."""
    bare = tmp_path / "bare"
    bare.mkdir()
    assert state.in_use(bare) is None
    fd = state.hold(bare)
    assert (bare / state.LOCK).read_text() == f"{os.getpid()}\n"
    assert not (bare / (state.LOCK + ".new")).exists()
    assert state.in_use(bare) is True
    os.close(fd)
    assert state.in_use(bare) is False


def test_owned_removes_its_dir_and_a_killed_owners_is_swept_by_the_next(tmp_path):
    root = str(tmp_path)
    with state.owned("task-", root) as path:
        assert os.path.isdir(path) and state.in_use(path) is True
    assert not os.path.exists(path)
    code = (
        "import os, signal; from tfrepro.trials import state\n"
        f"with state.owned('task-', {root!r}) as p:\n"
        "    print(p, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    assert os.path.isdir(dead)
    with state.owned("task-", root) as path:
        assert not os.path.exists(dead) and os.listdir(root) == [os.path.basename(path)]


def test_a_holder_killed_before_its_rename_does_not_block_the_next(tmp_path):
    """`hold` writes its lock under a name of its own, then renames it: a
    holder killed in between leaves that file, and the next holder of the
    same dir (a trial dir run again) still gets the lock (before: FileExistsError)."""
    for left in ("owner.lock.new", "owner.lock.abc123.new"):  # the old name, the new
        (tmp_path / left).write_text("12345\n")
    fd = state.hold(tmp_path)
    try:
        assert state.in_use(tmp_path) is True
    finally:
        os.close(fd)
    assert state.in_use(tmp_path) is False
