"""`tfrepro check` end to end on small planted projects (real TensorFlow).

One probed trial per project, shared by every test of the module: each planted
defect must be flagged by its own check and by no other, and the clean project
must pass all six.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.check.judge import CheckStatus

pytestmark = pytest.mark.e2e

PROJECTS = Path(__file__).parent / "projects_check"
EXPECTED = {
    "clean": [],
    "nan_inputs": ["first_batches"],
    "unnormalised": ["first_batches"],
    "labels_out_of_range": ["first_batches"],
    "slow_map": ["input_pipeline"],
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """name -> (project dir copy, CheckReport); each project runs once."""
    from tfrepro.check.run import checked_features, run_checks
    from tfrepro.project import Project

    root = tmp_path_factory.mktemp("projects_check")
    done: dict = {}

    def get(name: str):
        if name not in done:
            dest = root / name
            shutil.copytree(PROJECTS / name, dest, ignore=shutil.ignore_patterns(".tfrepro"))
            project = Project.load(dest)
            done[name] = (dest, run_checks(project, checked_features(project)))  # as `tfrepro check` runs it
        return done[name]

    return get


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_planted_defect_is_flagged_by_its_check_only(checked, name):
    _, report = checked(name)
    assert report.to_dict()["flagged"] == EXPECTED[name], "\n" + json.dumps(report.to_dict(), indent=1)[:4000]
    assert report.trial["probe_errors"] == []


def test_clean_project_passes_every_check(checked):
    _, report = checked("clean")
    assert [i.status for i in report.items] == [CheckStatus.PASS] * 6
    assert report.trial["mode"] == "fit"


def test_labels_are_judged_in_a_distributed_custom_loop(checked):
    _, report = checked("labels_out_of_range")
    assert report.trial["mode"] == "loop"
    item = report.item("first_batches")
    assert item.status is CheckStatus.FAIL
    assert "class ids in [1, 10], outside [0, 10) for a 10-way output" in item.summary
    assert "labels judged for CategoricalCrossentropy over 10 classes" in item.evidence
    # Seen before the split across replicas (peeking at the per-replica datasets deadlocked).
    assert "seen at: distributed dataset" in item.evidence
    # The zero rows of tf.one_hot do not crash: the loss still falls.
    assert report.item("short_run").status is CheckStatus.PASS


def test_nan_inputs_are_named_and_the_loss_checks_wait_for_the_data(checked):
    _, report = checked("nan_inputs")
    item = report.item("first_batches")
    assert item.status is CheckStatus.FAIL and "NaN" in item.summary
    # The NaN reaches the loss on every CPU (no ReLU can hide it: the project's docstring);
    # the short run is not judged while the data is flagged, and says what it saw.
    short = report.item("short_run")
    assert short.status is CheckStatus.SKIP, short
    assert short.summary == (
        "not judged: the first batches are flagged (check 3); observed: the loss became nan at step 1"
    ), short.summary
    assert report.item("initial_loss").status is CheckStatus.SKIP


def test_unnormalised_inputs_warn_with_their_scale(checked):
    _, report = checked("unnormalised")
    item = report.item("first_batches")
    assert item.status is CheckStatus.WARN and "far from normalised" in item.summary
    assert report.item("initial_loss").status is CheckStatus.SKIP
    assert "far above chance" in report.item("initial_loss").summary


def test_slow_map_is_input_bound_with_both_numbers(checked):
    _, report = checked("slow_map")
    assert "seen at: first dataset iterated" in report.item("first_batches").evidence
    item = report.item("input_pipeline")
    assert item.status is CheckStatus.WARN and item.summary.startswith("input-bound: the pipeline alone needs ")
    assert "ms per batch" in item.summary and "ms per step" in item.summary
    assert "num_parallel_calls" in item.fix


def test_cli_prints_the_checklist_and_exits_by_the_worst_status(checked):
    from tfrepro.cli import main

    runner = CliRunner()
    clean_dir, _ = checked("clean")  # the CLI reuses the cached probed trial
    res = runner.invoke(main, ["check", str(clean_dir)])
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1] == "6 pass, 0 warn, 0 fail, 0 skipped"
    labels_dir, _ = checked("labels_out_of_range")
    res = runner.invoke(main, ["check", str(labels_dir), "--json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)  # stderr says the features were detected in memory
    assert doc["status"] == "fail" and [c["status"] for c in doc["checks"]][2] == "fail"
    # --params only changes the judging: the same cached trial answers.
    res = runner.invoke(main, ["check", str(clean_dir), "--params", "5"])
    assert res.exit_code == 1
    assert (
        "6. parameters      FAIL  11,018 parameters: 11,018 trainable, 0 non-trainable (model 'sequential'); "
        "expected 5" in res.output
    )
    res = runner.invoke(main, ["check", str(clean_dir), "--with", "nope"])
    assert res.exit_code == 2 and "unknown feature: nope" in res.output
