"""`tfrepro report` after a version-mode bisect (issue 22: report works after
every bisect mode). The releases are faked as in tests/test_versions.py; the
report reads the run it left, exports the project as it ran and writes the
bundle (no re-run: that would need the release's environment)."""

from __future__ import annotations

import json
from pathlib import Path

from test_versions import VERSIONS, bisect_versions, project, scripted

from tfrepro.report.bundle import ReportOptions, build_report
from tfrepro.report.scan import BEGIN


def test_report_after_a_version_bisect_names_the_first_bad_release(tmp_path):
    (tmp_path / "proj").mkdir()
    root = project(tmp_path / "proj")
    r = bisect_versions(root, VERSIONS, trial=scripted("2.16.2"))
    assert (r["status"], r["first_bad_version"]) == ("found", "2.16.2")
    run_dir = root / r["run_dir"] if not Path(r["run_dir"]).is_absolute() else Path(r["run_dir"])
    bundle = build_report(run_dir, ReportOptions(rerun=False, localize=False, probe_environment=False))
    issue = (bundle.out / "ISSUE.md").read_text()
    assert "2.16.2" in issue and "2.15.1" in issue
    repro = (bundle.out / "repro.py").read_text()  # the script as written, then the line saying what it shows
    assert repro.startswith((root / "repro.py").read_text()) and repro.count(BEGIN) == 1
    assert json.loads((bundle.out / "result.json").read_text())["first_bad_version"] == "2.16.2"
