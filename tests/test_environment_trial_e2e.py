"""The report's environment facts come from a trial (the trial spawner, as
every process that runs for a report), and they are the facts the
standalone probe of `tfrepro env` gives."""

from __future__ import annotations

import pytest

from tfrepro.report import envreport

pytestmark = pytest.mark.e2e


def test_the_environment_trial_states_what_the_standalone_probe_states():
    in_trial = envreport.in_trial()
    assert "probe_error" not in in_trial, in_trial
    assert in_trial["tf_version"] and in_trial["keras_version"]
    assert in_trial == envreport.collect()


def test_an_environment_trial_that_cannot_start_says_why(tmp_path):
    facts = envreport.in_trial(python=str(tmp_path / "no-such-python"))
    assert set(facts) == {"probe_error"} and "environment probe failed" in facts["probe_error"]
