"""Issue 26: untestable is a status, not `none` (Contract 3/4): a trial with
no training step, or a symptom that could not be measured, is answered
`untestable` (exit 5) with its reason and the way out."""

from __future__ import annotations

from test_engine import FEATS, FakeRunner, make_project

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.cli.display import answer_lines
from tfrepro.trials import classify
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import RunResult, Status, TrialResult
from tfrepro.verdicts import Verdict

NO_STEP = {"losses": (), "step_times": (), "steps_run": 0, "mode": "none"}


def test_no_training_step_on_either_end_is_untestable_not_none(tmp_path):
    p = make_project(tmp_path, FEATS)
    res = bisect(p, runner=FakeRunner(lambda cfg, r: NO_STEP))
    doc = res.to_dict()
    assert (res.status, res.exit_code) == (Status.UNTESTABLE, 5)
    assert "no training step ran in the failing configuration" in doc["reason"]
    assert "step=<int> loss=<float>" in doc["reason"]  # the way out
    text = "\n".join(answer_lines(res))
    assert text.startswith("untestable: no training step ran") and "none:" not in text


def test_a_baseline_that_ran_no_step_cannot_vouch_for_a_healthy_failing_end(tmp_path):
    p = make_project(tmp_path, FEATS)
    res = bisect(p, runner=FakeRunner(lambda cfg, r: {} if cfg else NO_STEP))
    assert res.status == Status.UNTESTABLE and "the baseline" in res.reason


def test_a_failing_end_that_crashes_before_any_step_is_still_hunted(tmp_path):
    crash = {**NO_STEP, "crashed": True, "exit_code": 1, "error": "ValueError: boom"}
    p = make_project(tmp_path, FEATS)
    res = bisect(p, runner=FakeRunner(lambda cfg, r: crash if "xla" in cfg else {}))
    assert (res.status, res.symptom, res.culprits) == (Status.FOUND, Verdict.CRASH, ("xla",))


def test_a_slowdown_asked_for_with_no_step_past_the_warm_up_is_untestable(tmp_path):
    p = make_project(tmp_path, FEATS, steps=20)
    short = {"losses": (2.3, 2.2), "step_times": (0.5, 0.1), "steps_run": 2}
    res = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(lambda cfg, r: short))
    assert res.status == Status.UNTESTABLE and "warm-up" in res.reason


def test_healthy_measured_ends_stay_none():
    ran = TrialResult(losses=(1.0,), step_times=(0.1,), steps_run=1)
    assert classify.no_step_reason([ran], "x") is None
    assert classify.no_step_reason([TrialResult()], "the bad end abc").startswith("no training step ran in the bad end")
    assert classify.unmeasured(Verdict.MISMATCH, [TrialResult()], [ran]).startswith("the mismatch could not")
    assert classify.unmeasured(None, [TrialResult()], [TrialResult()]) is None


def test_untestable_is_written_with_its_reason_and_exit_code():
    r = RunResult(Status.UNTESTABLE, reason="no training step ran")
    doc = r.to_dict()
    assert (doc["status"], doc["reason"], r.exit_code) == ("untestable", "no training step ran", 5)


class _NoStepAtTheBadEnd:
    """Commit-mode trial stand-in: a commit whose script says NOSTEP trains nothing."""

    def __call__(self, project, enabled, settings, how=TrialOptions()):
        label = how.label
        src = (project.root / settings.entry).read_text()
        if "NOSTEP" in src:
            return TrialResult(label=label, mode="none")
        return TrialResult(label=label, losses=(1.0, 0.9), step_times=(0.01, 0.01), steps_run=2, mode="loop")


def test_commit_mode_with_a_bad_end_that_trains_nothing_is_untestable(tmp_path, monkeypatch):
    from gitrepo import GitRepo, isolated_git_env

    from tfrepro.bisect import commits

    isolated_git_env(tmp_path / "home", monkeypatch)
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    good = repo.commit("good", {"proj/repro.py": "x = 1\n"})
    bad = repo.commit("bad", {"proj/repro.py": "x = 1  # NOSTEP\n"})
    res = commits.bisect_commits(repo.root / "proj", good, bad, trial=_NoStepAtTheBadEnd())
    assert (res.status, res.exit_code) == (Status.UNTESTABLE, 5)
    assert res.reason.startswith("no training step ran in the bad end")


def test_one_ends_rule_for_both_modes():
    """`ends_reason`, feature mode's and range mode's: unless the failing end
    stopped (measured), a good end with no training step is untestable too."""
    ran = TrialResult(losses=(1.0, 0.9), steps_run=2, mode="fit")
    nothing = TrialResult()
    names = ("the good end abc", "the bad end def")
    assert classify.ends_reason([nothing], [ran], None, failed=False, names=names).startswith(
        "no training step ran in the good end abc"
    )
    assert classify.ends_reason([nothing], [ran], None, failed=True, names=names) is None
    assert classify.ends_reason([ran], [nothing], None, failed=False).startswith(
        "no training step ran in the failing configuration"
    )


def test_a_baseline_that_ran_no_step_is_no_reference_for_a_memory_kill(tmp_path):
    """One ends rule for both modes (`ends_reason`): unless the failing end
    stopped on a NaN, crash or timeout, an end with no training step is
    untestable before the symptom is picked (range mode's rule; feature mode
    checked the baseline only when nothing was picked and hunted this kill)."""
    oom = {"crashed": True, "exit_code": -9}
    p = make_project(tmp_path, FEATS)
    res = bisect(p, runner=FakeRunner(lambda cfg, r: NO_STEP if not cfg else oom if "xla" in cfg else {}))
    assert res.status == Status.UNTESTABLE and res.reason.startswith("no training step ran in the baseline")


def test_a_failing_end_that_exits_cleanly_before_any_step_is_untestable(tmp_path):
    """One early-exit rule for both modes (`ends.early_exit`), after the ends
    rule: a clean exit before the first step is `untestable` (the harness may
    not see that loop), in feature mode as in range mode; a crash is hunted."""
    p = make_project(tmp_path, FEATS)
    res = bisect(p, runner=FakeRunner(lambda cfg, r: NO_STEP if "xla" in cfg else {}))
    assert (res.status, res.exit_code) == (Status.UNTESTABLE, 5)
    assert res.reason.startswith("no training step ran in the failing configuration")


class _ExitsAfter3:
    """Commit-mode trial stand-in: a commit whose script says EXIT3 exits cleanly after 3 of 40 steps."""

    def __call__(self, project, enabled, settings, *, label="", **kw):
        n = 3 if "EXIT3" in (project.root / settings.entry).read_text() else 40
        return TrialResult(label=label, losses=(1.0,) * n, step_times=(0.01,) * n, steps_run=n, mode="loop")


def test_commit_mode_judges_a_clean_exit_after_3_of_40_steps_a_crash(tmp_path, monkeypatch):
    """Range mode counts a clean early exit as a crash, as feature mode does
    (`ends.early_exit`): the first commit that exits early is the first bad one."""
    from gitrepo import GitRepo, isolated_git_env

    from tfrepro.bisect import commits

    isolated_git_env(tmp_path / "home", monkeypatch)
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    good = repo.commit("good", {"proj/repro.py": "x = 1\n"})
    repo.commit("still good", {"proj/repro.py": "x = 2\n"})
    first_bad = repo.commit("exits", {"proj/repro.py": "x = 2  # EXIT3\n"})
    bad = repo.commit("bad", {"proj/repro.py": "x = 3  # EXIT3\n"})
    res = commits.bisect_commits(repo.root / "proj", good, bad, trial=_ExitsAfter3())
    assert (res.status, res.symptom, res.first_bad_commit) == (Status.FOUND, Verdict.CRASH, first_bad)
