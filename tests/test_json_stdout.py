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

    monkeypatch.setattr("tfrepro.bisect.display.run_bisect", run_bisect)
    r = CliRunner().invoke(main, ["bisect", str(tmp_path), "--json"])
    assert json.loads(r.stdout)["status"] == "none", r.stdout
    assert "Raylet is terminated" in r.stderr
