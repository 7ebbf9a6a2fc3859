"""The report's re-run runs the exported repro as written."""

from __future__ import annotations

from tfrepro.project import Project
from tfrepro.report.rerun import default_runner
from tfrepro.settings import TrialSettings

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
