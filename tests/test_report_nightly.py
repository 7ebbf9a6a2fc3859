"""`report --nightly`: the form's nightly question answered from a re-run
under the newest tf-nightly (fakes here; the real install is a benchmark)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from tfrepro.report import rerun as nightly
from tfrepro.report.issue import nightly_answer
from tfrepro.report.rerun import Reproduction


@dataclass
class FakeEnv:
    python: Path = Path("/nowhere/bin/python")
    versions: dict = field(default_factory=lambda: {"tensorflow": "2.22.0.dev20261130"})


@dataclass
class Listing:
    versions: tuple


def test_the_newest_nightly_is_picked_from_the_index():
    got = nightly.newest_nightly(lambda: Listing(("2.22.0.dev20261128", "2.22.0.dev20261130", "2.21.0.dev1")))
    assert got == "2.22.0.dev20261130"


def test_the_repro_reruns_under_the_nightly_interpreter_and_answers_the_form(tmp_path, monkeypatch):
    from tfrepro.settings import TrialSettings
    from tfrepro.trials import runner as trial_runner
    from tfrepro.trials.values import TrialResult

    calls = []

    def run_trial(project, enabled, settings, how):  # the trial the re-run starts
        calls.append(how)
        return TrialResult(losses=(1.0,), steps_run=1)

    monkeypatch.setattr(trial_runner, "run_trial", run_trial)
    (tmp_path / "repro.py").write_text("print('step=1 loss=1.0')\n")

    def reproduce(runner):  # the re-run: one trial of the exported repro
        runner(tmp_path, TrialSettings())
        return Reproduction("nan", True, "the loss became non-finite at step 3")

    env = FakeEnv()
    got = nightly.on_nightly(reproduce, env)
    assert asdict(got) == {  # report.json's `nightly`
        "version": "tf-nightly 2.22.0.dev20261130",
        "reproduced": True,
        "detail": "the loss became non-finite at step 3",
    }
    (how,) = calls  # under the nightly environment's interpreter, with its versions
    assert how.python == str(env.python) and how.versions == env.versions and how.use_cache is False
    assert nightly_answer(got) == "Yes: the symptom shows on tf-nightly 2.22.0.dev20261130 too."
    fixed = nightly.on_nightly(lambda r: Reproduction("nan", False, "finite at every step"), FakeEnv())
    assert nightly_answer(fixed).startswith("No: on tf-nightly 2.22.0.dev20261130 the symptom does not show")


def test_an_environment_that_cannot_be_built_is_said_not_guessed():
    got = nightly.on_nightly(lambda r: 1 / 0, "no environment for tf-nightly 2.22: install failed")
    assert got.reproduced is None
    assert nightly_answer(got).startswith("Tried on tf-nightly, undecided: no environment for tf-nightly")
    assert nightly_answer(None).startswith("No: not tried on the nightly build")


def test_a_version_bisects_nightly_trial_is_the_same_record():
    from tfrepro.report.bundle import _nightly

    result = {"symptom": "nan", "version_trials": [{"version": "2.21.0"}, {"version": "2.22.0.dev1", "verdict": "nan"}]}
    got = _nightly(result)
    assert asdict(got) == {"version": "2.22.0.dev1", "reproduced": True, "detail": "the version bisect's trial: nan"}
    assert nightly_answer(got) == "Yes: the symptom shows on 2.22.0.dev1 too."
