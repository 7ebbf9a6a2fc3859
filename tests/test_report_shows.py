"""The bundle's repro.py ends with a line saying what it shows (report/scan.py `with_footer`):
a `verbose=0` script prints nothing else."""

from __future__ import annotations

import gc
import sys
import types

import numpy as np
import pytest

from tfrepro.report.scan import BEGIN, with_footer

SCRIPT = "import keras\n\nmodel = keras.Model('net', LOSSES, WEIGHT)\n"


@pytest.fixture
def fake_keras(monkeypatch):
    """A `keras` module whose Model is a fresh class (gc finds only this test's models)."""
    mod = types.ModuleType("keras")

    class Model:
        def __init__(self, name, losses, weight):
            self.name, self.history = name, types.SimpleNamespace(history={"loss": losses})
            self.weight = weight

        def get_weights(self):
            if self.weight is None:
                raise RuntimeError("no weights yet")
            return [np.array([self.weight])]

    mod.Model = Model
    monkeypatch.setitem(sys.modules, "keras", mod)
    return mod


def _run(capsys, symptom: str, result: dict, losses, weight=1.0) -> str:
    gc.collect()  # the models of an earlier run: gone
    text = with_footer(SCRIPT, symptom, result)
    assert text.startswith(SCRIPT) and BEGIN in text
    exec(compile(text, "repro.py", "exec"), {"LOSSES": losses, "WEIGHT": weight})  # noqa: S102 - built here
    return capsys.readouterr().out.splitlines()[-1]


NAN_RUN = {"culprits": ["custom_layer_x"], "failing": {"first_nonfinite_step": 12}}


def test_a_nan_is_said_seen_or_not_seen_with_the_step_the_run_saw(fake_keras, capsys):
    seen = _run(capsys, "nan", NAN_RUN, [1.0, float("nan")])
    assert seen.startswith("(tfrepro) symptom seen: NaN/Inf in the loss of net (the run saw it at step 12;")
    weights = _run(capsys, "nan", NAN_RUN, [1.0, 0.5], weight=float("inf"))
    assert weights.startswith("(tfrepro) symptom seen: NaN/Inf in the weights of net")
    healthy = _run(capsys, "nan", NAN_RUN, [1.0, 0.5])
    assert healthy.startswith("(tfrepro) symptom NOT seen: no NaN/Inf") and "last loss: net 0.5" in healthy


def test_a_crash_reached_the_end_means_not_seen_and_the_others_say_to_compare(fake_keras, capsys):
    crash = _run(capsys, "crash", {"failing": {"error": 'ValueError: bad "x" {y}'}}, [1.0])
    assert crash.startswith("(tfrepro) symptom NOT seen: it ran to its end without the run's crash")
    assert 'ValueError: bad "x" {y}' in crash
    slow = _run(capsys, "slowdown", {"culprits": ["callback_auc"]}, [1.0])
    assert "slowdown (slower per step with callback_auc): compare with python reference.py" in slow
    assert "CPU " in slow and "peak memory " in slow


def test_the_footer_never_raises(fake_keras, capsys):
    line = _run(capsys, "nan", NAN_RUN, [1.0], weight=None)
    assert line == "(tfrepro) could not check what this run shows (RuntimeError: no weights yet)"


def test_the_footer_names_the_reference_where_the_bundle_puts_it(tmp_path, monkeypatch):
    """A reference of several files is reference/repro.py: the footer says to
    compare with that (it said reference.py, which such a bundle lacks)."""
    from report_fakes import ScriptedRunner, build, make_project, make_run

    monkeypatch.setattr("tfrepro.report.tables.have_tensorboard", lambda: False)
    root = make_project(tmp_path)
    (root / "helpers.py").write_text("STEPS = 8\n")
    (root / "repro.py").write_text("import helpers\n" + (root / "repro.py").read_text())
    b = build(make_run(root, "slowdown", ["slow_callback"]), ScriptedRunner())
    assert b.report.repro.reference == "reference/repro.py" and (b.out / "reference" / "repro.py").is_file()
    assert "compare with python reference/repro.py" in (b.out / "repro.py").read_text()
