"""The GradientTape steps of a script as facts for `tfrepro check` (check 7):
the model call's `training=`, whether the loss is a Keras loss object or a
hand-written expression, whether the step runs under `strategy.run` and
averages over the global batch. Uses the loop recogniser's pieces
(annotate/loops.py)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tfrepro.annotate import loops
from tfrepro.annotate.source import Src, arg, is_name, last_name


@dataclass(frozen=True)
class StepFacts:
    """One GradientTape step as written: what `tfrepro check` judges."""

    line: int
    model: str
    training: bool | None  # the `training=` of the model call in the tape (None: not given)
    loss_object: bool  # `fn(labels, pred)` (annotate/loops.py `loss_call`), else a hand-written expression
    loss_code: str
    per_replica: bool  # the step runs under strategy.run
    global_average: bool  # the loss is averaged over the global batch (compute_average_loss, a division)


def step_facts(src: Src) -> list[StepFacts]:
    out = []
    for node in src.nodes(cst.Call):
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value in loops.APPLY):
            continue
        try:
            out.append(_facts(src, node))
        except loops.NotSwitchable:
            continue
    return out


def _facts(src: Src, apply_call: cst.Call) -> StepFacts:
    region, grad = loops.step_region(src, apply_call)
    loss_name, model = loops._loss_and_model(grad)
    assigned = src.assignments(region, loss_name)
    code = src.code(assigned[-1].value) if assigned else ""
    calls = [n for n in src.walk(region) if loops._is_model_call(n, model)]
    training = arg(calls[0], None, "training") if calls else None
    value = None if training is None else {"True": True, "False": False}.get(src.code(training.value))
    try:
        loss_object = loops.loss_call(src, *loops._loss_expr(src, region, loss_name, model)) is not None
    except loops.NotSwitchable:
        loss_object = True  # not identified: no claim about ranks
    runs = isinstance(region, cst.FunctionDef) and any(
        last_name(n.func) == "run" and n.args and is_name(n.args[0].value, region.name.value)
        for n in src.nodes(cst.Call)
    )
    global_avg = "compute_average_loss" in code or "global_batch" in code.lower() or "/" in code
    return StepFacts(src.line(grad), model, value, loss_object, code, runs, global_avg)
