"""The report's re-run runs the exported repro as written; a slowdown is
re-verified in B C B timing pairs (fakes, milliseconds)."""

from __future__ import annotations

from tfrepro.project import Project
from tfrepro.report.export import Export
from tfrepro.report.rerun import Reproduction, RerunSpec, default_runner, reproduce
from tfrepro.settings import TIMING_MIN_STEPS, TIMING_MIN_TIME_S, TIMING_STEPS_MAX, SymptomSettings, TrialSettings
from tfrepro.trials.values import TrialResult

# Unmarked (as every exported repro is), with a line zero-edit detection
# recognises as a feature: plain Python, no TensorFlow.
EXPORTED = """import types

keras = types.SimpleNamespace(mixed_precision=types.SimpleNamespace(set_global_policy=lambda p: POLICY.append(p)))
POLICY = []
keras.mixed_precision.set_global_policy("mixed_float16")
loss = float("nan") if POLICY else 1.0
for step in range(1, 4):
    print(f"step={step} loss={loss}")
"""


def test_rerun_keeps_the_culprit_that_zero_edit_detection_would_switch_off(tmp_path):
    (tmp_path / "repro").mkdir()
    (tmp_path / "repro" / "repro.py").write_text(EXPORTED)
    assert Project.load(tmp_path / "repro").feature_names == ("mixed_precision",)  # what went wrong before
    result = default_runner(tmp_path / "state")(tmp_path / "repro", TrialSettings(steps=3))
    assert result.first_nonfinite_step == 1


# -- slowdown: B C B timing pairs, reference.py and repro.py -------------------------------


class TimedRunner:
    """Stand-in for the trial runner: the step time is `STEP` in the file it
    runs; a timing run (a time budget) has enough steady steps; `others`
    is the harness's load measurement; "CRASH" in a file crashes it."""

    def __init__(self, others: float | None = 0.0) -> None:
        self.calls: list[tuple[str, TrialSettings]] = []
        self.others = others

    def __call__(self, project_dir, settings: TrialSettings) -> TrialResult:
        src = (project_dir / settings.entry).read_text()
        self.calls.append((project_dir.name, settings))
        if "CRASH" in src:
            return TrialResult(crashed=True, exit_code=1, error="ValueError: boom", mode="loop")
        step = float(src.split("STEP = ")[1].split()[0])
        n = settings.min_steps if settings.timing else 5
        return TrialResult(
            losses=(1.0,) * (3 + n),
            steps_run=3 + n,
            mode="loop",
            step_times=(0.5,) * 3 + (step,) * n,
            extra={"others_cpu": self.others},
        )


def rerun_slowdown(runner, cand_step: float | str, ref_step: float | str = 0.002) -> Reproduction:
    text = lambda x: f"STEP = {x}\n" if isinstance(x, float) else x
    spec = RerunSpec(TrialSettings(steps=8), SymptomSettings())
    export = Export(None, None, {"repro.py": text(cand_step)}, {"repro.py": text(ref_step)})
    return reproduce("slowdown", export, spec, runner=runner)


def test_a_10x_slower_repro_reproduces_on_one_clear_pair_of_time_budget_runs():
    runner = TimedRunner()
    rep = rerun_slowdown(runner, 0.02)
    assert rep.reproduced is True and "10.00x that of reference.py" in rep.detail and "1 clear-cut pair" in rep.detail
    # reference, repro, reference (the unpaired test took 3 pairs: 6 runs)
    assert [(d, s.repeat) for d, s in runner.calls] == [("reference", 0), ("candidate", 0), ("reference", 1)]
    for _, s in runner.calls:
        assert (s.min_time_s, s.min_steps, s.steps_max) == (TIMING_MIN_TIME_S, TIMING_MIN_STEPS, TIMING_STEPS_MAX)
    assert rep.timing["fast"] and rep.timing["pairs"][0]["quiet"]


def test_a_vs_a_is_not_reproduced():
    runner = TimedRunner()
    rep = rerun_slowdown(runner, 0.002)
    assert rep.reproduced is False and rep.detail.startswith("not slower") and len(runner.calls) == 3


def test_on_a_loaded_machine_each_reference_run_serves_the_pairs_on_both_sides():
    # 3x with others using 60% of the CPUs: two clear pairs (slowdown.TimingPair.decisive)
    runner = TimedRunner(others=0.6)
    rep = rerun_slowdown(runner, 0.006)
    assert rep.reproduced is True and rep.timing["pairs"][0]["others"] == [0.6, 0.6, 0.6]
    assert [(d, s.repeat) for d, s in runner.calls] == [
        ("reference", 0),
        ("candidate", 0),
        ("reference", 1),
        ("candidate", 1),
        ("reference", 2),
    ]


def test_a_timing_run_that_crashes_stops_timing_with_a_verdict():
    runner = TimedRunner()
    rep = rerun_slowdown(runner, "CRASH\n")
    assert rep.reproduced is False and rep.detail == "a timing run of repro.py stopped with crash"
    assert [d for d, _ in runner.calls] == ["reference", "candidate"]
    runner = TimedRunner()
    rep = rerun_slowdown(runner, 0.02, "CRASH\n")  # a broken reference decides nothing
    assert rep.reproduced is None and "reference.py stopped with crash" in rep.detail
    assert [d for d, _ in runner.calls] == ["reference"]


def test_the_details_name_the_reference_where_the_bundle_puts_it():
    """A multi-file reference is reference/repro.py in the bundle (Export.ref_name):
    the re-run's details, which ISSUE.md quotes, name that file."""
    spec = RerunSpec(TrialSettings(steps=8), SymptomSettings())
    two = {"helpers.py": "X = 1\n"}  # a reference of several files: reference/repro.py
    slow = reproduce(
        "slowdown",
        Export(None, None, {"repro.py": "STEP = 0.02\n", **two}, {"repro.py": "STEP = 0.002\n", **two}),
        spec,
        runner=TimedRunner(),
    )
    assert "that of reference/repro.py" in slow.detail and "reference.py" not in slow.detail

    def runner(where, settings):
        losses = (1.0, 2.0) if where.name == "candidate" else (1.0, 1.0)
        return TrialResult(losses=losses, steps_run=2, mode="fit")

    far = reproduce(
        "mismatch", Export(None, None, {"repro.py": "", **two}, {"repro.py": "", **two}), spec, runner=runner
    )
    assert far.reproduced and "deviation from reference/repro.py" in far.detail
