"""`.tfrepro/` is tfrepro's own (issue 24): never followed out of the project,
pruned by its records only, never pruned under a running trial, and a trial
whose directory is removed under it is never cached."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.cli import main
from tfrepro.errors import UserError
from tfrepro.trials.state import StateDir, clean_project

PY = sys.executable


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
    return subprocess.run([PY, "-m", "tfrepro", *args], capture_output=True, text=True, env=full_env, timeout=600)


def user_dir_like_a_state_dir(where: Path) -> Path:
    user = where / "mine"
    (user / "runs" / "2020").mkdir(parents=True)
    (user / "runs" / "2020" / "notes.txt").write_text("keep me\n")
    (user / "trials" / "x").mkdir(parents=True)
    (user / "trials" / "x" / "weights.h5").write_bytes(b"w" * 100)
    return user


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_symlinked_or_non_directory_state_dir_is_refused_and_its_target_untouched(tmp_path, kind):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "repro.py").write_text("print('step=1 loss=0.5')\n")
    user = user_dir_like_a_state_dir(tmp_path)
    if kind == "symlink":
        (proj / ".tfrepro").symlink_to(user)
    else:
        (proj / ".tfrepro").write_text("not a dir\n")

    for args in (["clean", str(proj)], ["clean", str(proj), "--all"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, r.output
        assert ".tfrepro" in r.output and "hint:" in r.output
    with pytest.raises(UserError):
        StateDir.of(proj).new_trial_dir("ab" * 32)
    r = cli("run", str(proj), "--steps", "1")
    assert r.returncode == 2, r.stderr

    assert (user / "runs" / "2020" / "notes.txt").read_text() == "keep me\n"
    assert (user / "trials" / "x" / "weights.h5").stat().st_size == 100
    assert sorted(os.listdir(user)) == ["runs", "trials"]  # nothing written there either


def test_prune_and_clean_all_delete_only_what_the_state_dir_recorded(tmp_path):
    state = StateDir(tmp_path / ".tfrepro")
    t = state.new_trial_dir("cd" * 32)
    (t / "result.json").write_text("{}")
    state.release(t)
    r = state.new_run_dir("r1")
    state.release(r)
    # A user's own dirs and files that happen to sit in there (copied in, a `mv` gone wrong).
    (state.path / "trials" / "my-experiment").mkdir()
    (state.path / "trials" / "my-experiment" / "w.h5").write_text("w")
    (state.path / "runs" / "mine").mkdir()
    (state.path / "cache").mkdir()
    (state.path / "cache" / "notes.txt").write_text("n")
    (state.path / "README").write_text("r")

    state.prune(keep_runs=0, keep_trials=0)
    assert not t.exists() and not r.exists()
    pruned = clean_project(tmp_path, everything=True)

    assert (state.path / "trials" / "my-experiment" / "w.h5").read_text() == "w"
    assert (state.path / "runs" / "mine").is_dir()
    assert (state.path / "cache" / "notes.txt").read_text() == "n"
    assert (state.path / "README").read_text() == "r"
    assert len(pruned.foreign) == 4 and "no record" in pruned.describe()


def test_clean_judges_a_commit_runs_checkouts_by_their_lock_not_their_name(tmp_path):
    """A running commit-mode run's checkouts are kept (and counted in use);
    a killed one's go, also when its pid in the name now belongs to a live
    process (`state.hold` and `in_use` on its mark: one rule, the lock)."""
    state = StateDir(tmp_path / ".tfrepro")
    live = state.make_dir(state.path / "checkouts" / "999999999-1")
    dead = state.make_dir(state.path / "checkouts" / f"{os.getppid()}-2")
    state.release(dead)  # its run is over (killed: the kernel dropped its lock)
    pruned = state.clean(keep_runs=5, keep_trials=5)
    assert live.is_dir() and not dead.exists()
    assert pruned.busy == 1 and "kept 1 in use by a running tfrepro" in pruned.describe()
    state.release(live)
    state.clean(keep_runs=5, keep_trials=5)
    assert not live.exists()


WAITS = """
import os, socket
s = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])))
s.sendall(os.getcwd().encode() + b"\\n")
s.recv(1)  # until the test says go: an event, not a timing
print("step=1 loss=0.5")
"""


def test_clean_all_never_removes_a_running_trial_and_its_result_is_cached(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "repro.py").write_text(WAITS)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(600)
    env = {"PORT": str(server.getsockname()[1]), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen(
        [PY, "-m", "tfrepro", "run", str(proj), "--json", "--steps", "1"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        conn, _ = server.accept()
        variant = Path(conn.makefile().readline().strip())

        pruned = clean_project(proj, everything=True)
        assert variant.is_dir() and (variant / "repro.py").is_file()
        assert pruned.busy >= 1
        conn.sendall(b"g")
        out, err = p.communicate(timeout=600)
    finally:
        server.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert len(list((proj / ".tfrepro" / "cache").glob("*.json"))) == 1
    # The trial is over: now clean removes its copy at once (no hours-long grace).
    clean_project(proj)
    assert not variant.exists()


def test_a_trial_whose_directory_is_removed_under_it_is_never_cached(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "repro.py").write_text("import os, shutil, sys\nshutil.rmtree(os.path.dirname(os.getcwd()))\nsys.exit(3)\n")

    r = cli("run", str(proj), "--json", "--steps", "1")

    assert r.returncode != 0
    assert "removed while it ran" in r.stdout + r.stderr
    assert not list((proj / ".tfrepro" / "cache").glob("*.json"))
