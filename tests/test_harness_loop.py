"""harness_loop's bookkeeping with a fake harness core (no TensorFlow): steps
from replica losses, the printed-line override, the traced-step list."""

from __future__ import annotations

import importlib.util
import io
import math
import os
import sys
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

    def loop_step(self, loss, dt):  # harness.loop_step, less its clock (tests/test_harness_loop.py holds that)
        if self.S.mode == "none":
            self.S.mode = "loop"
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


def test_eager_replicas_make_one_step_once_all_have_applied(loop, monkeypatch):
    module, core = loop
    ctx = types.SimpleNamespace(num_replicas_in_sync=2, _replica_id_in_sync_group=0)
    tf = types.SimpleNamespace(  # eager, under a strategy of 2 replicas; a loss is its own scalar
        distribute=types.SimpleNamespace(get_replica_context=lambda: ctx),
        executing_eagerly=lambda: True,
        reduce_sum=lambda p: p,
        cast=lambda x, dtype: types.SimpleNamespace(numpy=lambda: x),
        float32="float32",
    )
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    optimizer = object()

    def apply(loss, rid):  # one replica's eager apply, after its tape's gradient of `loss`
        ctx._replica_id_in_sync_group = rid
        module._tls.target = loss
        module._on_apply(optimizer)

    apply(0.5, 1)
    apply(0.5, 1)
    assert core.S.steps_seen == 0
    apply(0.25, 0)
    assert core.S.losses == [0.75]
    apply(1.0, 0)
    assert core.S.losses == [0.75, 1.5]


def _real_core(tmp_path, monkeypatch):
    """The real harness core (harness.py) on a fresh state, with harness_loop bound to it."""
    from tfrepro.inside import harness

    monkeypatch.setattr(harness, "S", harness._State({"result_path": str(tmp_path / "result.json")}))
    spec = importlib.util.spec_from_file_location("_tfrepro_harness_loop", INSIDE_DIR / "harness_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.H = harness
    monkeypatch.setitem(sys.modules, "_tfrepro_harness_loop", module)
    return harness, module


def test_a_steps_time_holds_the_loop_not_the_harness_bookkeeping(tmp_path, monkeypatch):
    # A fake clock: the loop's step takes 1 s, recording it (the harness's own work) 5 s; fit's step time,
    # batch begin to batch end, holds none of the harness's work either. The same for a printed line.
    harness, module = _real_core(tmp_path, monkeypatch)
    clock = [0.0]
    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])
    harness.S.t_ref = 0.0
    recorded = harness.record_step

    def slow_record(loss, dt):
        recorded(loss, dt)
        clock[0] += 5.0

    monkeypatch.setattr(harness, "record_step", slow_record)
    for _ in range(3):
        clock[0] += 1.0
        module._record([1.0])
    clock[0] += 1.0
    harness.loop_step(1.0)  # the stdout tap's step
    assert harness.S.step_times == [1.0, 1.0, 1.0, 1.0]


def test_a_loop_step_is_timed_from_the_end_of_the_step_before(tmp_path, monkeypatch):
    """harness.loop_step, the one loop step of an apply and of a printed line:
    the mode becomes "loop", the time runs from the previous step's end."""
    harness, _ = _real_core(tmp_path, monkeypatch)
    clock = [10.0]  # a fake clock: no wall-clock threshold
    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])
    harness.S.t_ref = 9.0  # the step before ended a second ago
    harness.loop_step(2.0)
    assert harness.S.mode == "loop" and harness.S.step_times[0] == 1.0
    clock[0] = 12.0
    harness.loop_step(3.0, 0.25)  # a graph drain measured its own
    assert harness.S.step_times[1] == 0.25 and harness.S.losses == [2.0, 3.0]
    assert harness.S.t_ref == 12.0  # the next step is timed from this one's end


def test_a_printed_step_after_dropped_apply_steps_is_timed_from_where_theirs_began(tmp_path, monkeypatch):
    """The stdout tap used to take the printed step's time before the dropped
    apply steps were undone: the first printed step got the time since the
    last apply (a sliver), the second the time since the loop began (both)."""
    harness, loop = _real_core(tmp_path, monkeypatch)
    tap = harness.StdoutTap(io.StringIO())
    clock = [10.0]  # a fake clock: no wall-clock threshold
    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])
    harness.S.t_ref = 9.0  # the loop began a second ago
    clock[0] = 10.5
    loop._record([2.0])  # apply_gradients of step 1, half a second before its printed line
    clock[0] = 11.0
    tap.write("step=1 loss=2.0\n")
    assert harness.S.extra["loop_loss_source"] == "stdout" and harness.S.steps_seen == 1
    assert harness.S.step_times[0] == 2.0  # the whole of step 1
    clock[0] = 11.25
    tap.write("step=2 loss=1.5\n")
    assert harness.S.step_times[1] == 0.25 and harness.S.losses == [2.0, 1.5]
