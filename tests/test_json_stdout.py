"""`tfrepro bisect --json`: stdout is the one result object, whatever else
prints meanwhile (Ray's driver printed a raylet's death notice on stdout
before it: tests/test_ray_multinode_e2e.py read the last line to get by)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tfrepro.cli import main
from tfrepro.trials.values import RunResult, Status


def test_what_prints_during_the_hunt_goes_to_stderr(tmp_path, monkeypatch):
    (tmp_path / "repro.py").write_text("x = 0\n# tfrepro: feature a -- a on\n# x += 1\n# tfrepro: end\n")

    def run_bisect(project, options, *, as_json):
        print("(raylet) Raylet is terminated. Termination is unexpected.")
        return RunResult(Status.NONE)

    monkeypatch.setattr("tfrepro.cli.display.run_bisect", run_bisect)
    r = CliRunner().invoke(main, ["bisect", str(tmp_path), "--json"])
    assert json.loads(r.stdout)["status"] == "none", r.stdout
    assert "Raylet is terminated" in r.stderr


def test_in_commit_mode_too_what_prints_during_the_hunt_goes_to_stderr(tmp_path, monkeypatch):
    # one rule for every mode: the `bisect` command prints the answer after the hunt
    def bisect_commits(path, good, bad, options, **kwargs):
        print("(raylet) Raylet is terminated. Termination is unexpected.")
        return RunResult(Status.NONE)

    monkeypatch.setattr("tfrepro.bisect.commits.bisect_commits", bisect_commits)
    r = CliRunner().invoke(main, ["bisect", str(tmp_path), "--good", "a", "--bad", "b", "--json"])
    assert json.loads(r.stdout)["status"] == "none", r.stdout
    assert "Raylet is terminated" in r.stderr


def test_sigterm_during_a_feature_bisect_is_130_and_the_handler_is_restored(tmp_path, monkeypatch):
    # One SIGTERM handler for every command (the CLI's `sigterm_interrupts`):
    # the engine is interrupted as on Ctrl-C, the caller's handler comes back.
    import os
    import signal

    (tmp_path / "repro.py").write_text("x = 0\n# tfrepro: feature a -- a on\n# x += 1\n# tfrepro: end\n")
    reached: list[str] = []

    def run_bisect(project, options, *, as_json):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (the main) thread before the next line
        reached.append("after the signal")
        return RunResult(Status.NONE)

    mine = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        monkeypatch.setattr("tfrepro.cli.display.run_bisect", run_bisect)
        r = CliRunner().invoke(main, ["bisect", str(tmp_path), "--json"])
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, mine)
    assert r.exit_code == 130 and reached == []
    assert json.loads(r.stdout)["status"] == "interrupted"
