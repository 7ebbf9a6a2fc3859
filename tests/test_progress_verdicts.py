"""The live progress line shows the engine's verdicts (issue 23): during a
mismatch hunt a trial the engine judges `mismatch` (against its reference,
the baseline) is printed `mismatch`, never `ok` (a trial alone shows no
mismatch: that needs the reference)."""

from __future__ import annotations

import io
import re

from rich.console import Console
from test_engine import FEATS, FakeRunner, losses, make_project

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.cli import display


def _progress_verdicts(text: str) -> dict[int, str]:
    """trial index -> the verdict its progress line printed."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\d+) (\w+)\s", line)
        if m:
            assert int(m.group(1)) not in out, "a trial shown twice"
            out[int(m.group(1))] = m.group(2)
    return out


def test_a_mismatch_hunt_prints_mismatch_for_the_trials_the_engine_judged_so(tmp_path):
    p = make_project(tmp_path, FEATS)
    runner = FakeRunner(lambda cfg, r: {"losses": losses(1.2)} if "cache" in cfg else {})
    buf = io.StringIO()
    console = Console(file=buf, width=200, no_color=True)
    progress = display.RichProgress(console)
    with progress.status:
        res = bisect(p, BisectOptions(), runner=runner, events=progress)
    doc = res.to_dict()
    assert (doc["status"], doc["symptom"], doc["culprits"]) == ("found", "mismatch", ["cache"])
    printed = _progress_verdicts(buf.getvalue())
    table = doc["trials_table"]
    assert sorted(printed) == list(range(1, doc["trials"] + 1))  # every trial shown once
    # what each line printed is what the engine decided for that trial
    assert [printed[i + 1] for i in range(len(table))] == [row["verdict"] for row in table]
    shown = {tuple(row["enabled"]): printed[i + 1] for i, row in enumerate(table)}
    assert shown[("cache",)] == "mismatch" and shown[tuple(FEATS)] == "mismatch"
