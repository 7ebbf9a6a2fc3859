"""harness_loop's bookkeeping with a fake harness core (no TensorFlow): steps
from replica losses, the printed-line override, the traced-step list."""

from __future__ import annotations

import importlib.util
import math
import os
import types

import pytest

from tfrepro.inside import INSIDE_DIR


class FakeCore:
    def __init__(self, steps: int = 0) -> None:
        self.S = types.SimpleNamespace(
            extra={},
            steps_seen=0,
            losses=[],
            step_times=[],
            first_nonfinite_step=None,
            budget=None,
            config={},
            mode="none",
            t_ref=0.0,
            pid=os.getpid(),
            fit_depth=0,
        )
        self.errors: list[str] = []

    def record_step(self, loss, dt):
        self.S.steps_seen += 1
        self.S.step_times.append(dt)
        if loss is not None:
            self.S.losses.append(loss)
            if not math.isfinite(loss) and self.S.first_nonfinite_step is None:
                self.S.first_nonfinite_step = self.S.steps_seen

    def note_error(self, where):
        self.errors.append(where)


@pytest.fixture
def loop():
    spec = importlib.util.spec_from_file_location("_test_harness_loop", INSIDE_DIR / "harness_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    core = FakeCore()
    module.H = core
    return module, core


def test_a_step_is_the_sum_of_its_replicas_losses(loop):
    module, core = loop
    module._record([1.0], dt=0.5)
    module._record([0.25, 0.5], dt=0.5)
    assert core.S.losses == [1.0, 0.75] and core.S.mode == "loop"
    assert core.S.extra["loop_loss_source"] == "apply"
    assert core.S.extra["loop_replica_losses"] == [[0.25, 0.5]]


def test_an_unknown_replica_loss_makes_the_step_lossless(loop):
    module, core = loop
    module._record([0.25, None], dt=0.1)
    assert core.S.steps_seen == 1 and core.S.losses == []


def test_a_printed_step_line_replaces_the_recorded_steps(loop):
    module, core = loop
    core.S.t_ref = 5.0
    module._record([2.0], dt=0.1)
    module._record([float("nan")], dt=0.1)
    assert core.S.first_nonfinite_step == 2
    module.yield_to_stdout()
    assert core.S.steps_seen == 0 and core.S.losses == [] and core.S.step_times == []
    assert core.S.first_nonfinite_step is None and core.S.extra["loop_loss_source"] == "stdout"
    assert core.S.t_ref == 5.0  # the printed step's time starts where the dropped steps' did
    module._record([3.0], dt=0.1)  # once lines are printed, apply_gradients steps do not count
    assert core.S.steps_seen == 0


def test_a_traced_step_is_listed(loop):
    module, core = loop
    module.L.traced = True
    module._record([1.0], dt=0.1)
    module._record([1.0], dt=0.1)
    assert core.S.extra["loop_traced_steps"] == [1]


def test_eager_replicas_make_one_step_once_all_have_applied(loop):
    module, core = loop
    module._eager_replica(0.5, 1, 2)
    module._eager_replica(0.5, 1, 2)
    assert core.S.steps_seen == 0
    module._eager_replica(0.25, 0, 2)
    assert core.S.losses == [0.75]
    module._eager_replica(1.0, 0, 2)
    assert core.S.losses == [0.75, 1.5]


def test_a_steps_time_holds_the_loop_not_the_harness_bookkeeping(loop, monkeypatch):
    # A fake clock: the loop's step takes 1 s, recording it (the harness's own work) 5 s; fit's step time,
    # batch begin to batch end, holds none of the harness's work either.
    module, core = loop
    clock = [0.0]
    monkeypatch.setattr(module.time, "perf_counter", lambda: clock[0])
    recorded = core.record_step

    def slow_record(loss, dt):
        recorded(loss, dt)
        clock[0] += 5.0

    core.record_step = slow_record
    for _ in range(3):
        clock[0] += 1.0
        module._record([1.0])
    assert core.S.step_times == [1.0, 1.0, 1.0]
