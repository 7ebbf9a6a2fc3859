"""The hand-written training loop as a feature (`custom_loop`), whose OFF form
is `fit` built from the loop's own parts, so a mismatch bisect compares the
loop with fit as the old advice says (DOMAIN.md: "compare the first steps of
both on tiny data").

Three forms are recognised:
- a `GradientTape` loop: `tape.gradient(loss, model.trainable_variables)`
  and `optimizer.apply_gradients(...)`/`apply(...)`, inline in a `for` over
  the data or in a step function the loop calls. OFF: the same model
  compiled with the same optimizer and the loss (a loss object or function
  called as `fn(y, pred)` as it is; a hand-written expression wrapped as
  `def fit_loss(y_true, y_pred)`) in the loop's compile mode (eager, graph
  or XLA: `compile_mode` below), then `fit` over the same dataset
  expression, for the same number of epochs;
- a `train_on_batch` loop over the data. OFF: `fit` over the same data;
- a `train_step` override of a Model subclass whose loss is the compiled one.
  OFF: the method removed (Keras's own train_step).

A loop whose parts cannot be identified (no single model, a loss that reads
other state, data that is not iterated as (x, y), names the rest of the
script reads) is reported as detected but not switchable, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from tfrepro.annotate.model import BlockSeg, Context, Edit, Found
from tfrepro.annotate.source import Src, arg, is_name, is_tf_function, jit_on, last_name, rebinds_itself

_VARS = ("trainable_variables", "trainable_weights")
APPLY = ("apply_gradients", "apply")  # the optimizer's step (check 7 finds GradientTape steps by it too)
_NAME = m.Element(m.Name()) | m.StarredElement(m.Name())
_NAME_PAIR = m.Tuple([_NAME, _NAME]) | m.List([_NAME, _NAME])  # `x, y` or `[x, y]`: two names
_NOT_SWITCHABLE = "custom_loop: a hand-written training loop ({form}) is detected but not switchable: {why}"


class NotSwitchable(Exception):
    pass


@dataclass
class Loop:
    """What the fit stand-in needs."""

    block: cst.For  # the statement the block wraps (the epoch loop when there is one)
    model: str
    data: str
    epochs: str | None
    optimizer: str | None = None  # None: the model is compiled already (train_on_batch)
    loss: str | None = None  # the compile loss expression
    loss_def: str | None = None  # body expression of a wrapped hand-written loss
    loss_base: str | None = None  # `keras.losses.Loss` when the loss reshapes the labels itself
    mode: str | None = None  # compile's keywords for the loop's compile mode (`compile_mode`)


def loop_edits(src: Src, ctx: Context) -> list[Edit]:
    edits: list[Edit] = []
    seen: set[int] = set()
    finders = {
        **dict.fromkeys(APPLY, ("GradientTape", _tape_loop)),
        "train_on_batch": ("train_on_batch", _train_on_batch_loop),
    }
    for node in src.nodes(cst.Call, cst.FunctionDef):
        if isinstance(node, cst.FunctionDef):
            if node.name.value == "train_step" and (edit := _train_step_override(src, ctx, node)) is not None:
                edits.append(edit)
            continue
        if not m.matches(node.func, m.Attribute(value=m.Name())) or node.func.attr.value not in finders:
            continue
        form, finder = finders[node.func.attr.value]
        try:
            loop = finder(src, node)
            # Names the loop binds that the rest of its scope reads: fit would leave them undefined.
            stmts = list(src.parent(loop.block).body)  # type: ignore[union-attr]  (a compound statement's suite)
            bound = _bound_names(src, loop.block)
            later = stmts[stmts.index(loop.block) + 1 :]
            read = {n.value for s in later for n in src.walk(s) if isinstance(n, cst.Name)}
            assigned_later = {n for s in later for n in _bound_names(src, s)}
            if used := sorted((bound & read) - assigned_later):
                raise NotSwitchable(f"{', '.join(f'`{n}`' for n in used)}, set in the loop, is read after it")
        except NotSwitchable as e:
            if str(e):
                ctx.skip(src.path, src.line(node), _NOT_SWITCHABLE.format(form=form, why=e))
            continue
        if id(loop.block) in seen:
            continue
        seen.add(id(loop.block))
        if (edit := _edit(src, ctx, loop, form)) is not None:
            edits.append(edit)
    return edits


# -- the GradientTape loop -------------------------------------------------------------------


def step_region(src: Src, apply_call: cst.Call) -> tuple[cst.For | cst.FunctionDef, cst.Call, str, str]:
    """(the step: the loop holding `apply_call` inline, else its function;
    the tape's gradient call; the loss it differentiates; the model whose
    trainable variables it is taken over)."""
    fn = src.enclosing(apply_call, cst.FunctionDef)
    loop = src.enclosing(apply_call, cst.For)
    inline = loop is not None and src.enclosing(loop, cst.FunctionDef) is fn  # the loop is inside the function
    region = loop if inline else fn
    if region is None:
        raise NotSwitchable("")  # an apply outside any loop or function: not a training step
    tapes = {
        n.asname.name.value
        for n in src.walk(region)
        if m.matches(n, m.WithItem(item=m.Call(), asname=m.AsName(name=m.Name())))
        and last_name(n.item.func) == "GradientTape"
    }
    gradient = m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("gradient")))
    grads = [n for n in src.walk(region) if m.matches(n, gradient) and n.func.value.value in tapes]
    if not grads:
        raise NotSwitchable("")  # `.apply(...)` of something else
    if len(grads) > 1:
        raise NotSwitchable("several tape.gradient calls in one step")
    target, sources = arg(grads[0], 0, "target"), arg(grads[0], 1, "sources")
    if target is None or not isinstance(target.value, cst.Name):
        raise NotSwitchable("the tape's target is not one named loss")
    s = sources.value if sources is not None else None
    if not (isinstance(s, cst.Attribute) and s.attr.value in _VARS and isinstance(s.value, cst.Name)):
        raise NotSwitchable("the gradient is not taken over one model's trainable_variables")
    return region, grads[0], target.value.value, s.value.value  # type: ignore[return-value]


def _tape_loop(src: Src, apply_call: cst.Call) -> Loop:
    optimizer = apply_call.func.value.value  # type: ignore[union-attr]
    region, _, loss_name, model = step_region(src, apply_call)
    expr, pred = _loss_expr(src, region, loss_name, model)
    # The model's input: the one name the model is called on (in the loss, or where the prediction is bound).
    called = src.assignments(region, pred.value)[0].value if isinstance(pred, cst.Name) else pred
    first = arg(called, 0, None)
    if first is None or not isinstance(first.value, cst.Name) or any(a.keyword is None for a in called.args[1:]):
        raise NotSwitchable("the model is not called on one named input")
    x = first.value.value
    locals_ = _bound_names(src, region)
    if isinstance(region, cst.FunctionDef):
        step, params = region.name.value, [p.name.value for p in region.params.params]
        for name in (model, optimizer):
            if name in params or name in locals_:
                raise NotSwitchable(f"`{name}` is local to {step}(): fit cannot be given it")
        calls = [n for n in src.nodes(cst.Call) if is_name(n.func, step)]  # called once, inside a `for` loop
        if not calls:
            raise NotSwitchable(f"{step}() is not called directly from a loop (strategy.run or a callback calls it)")
        if len(calls) > 1:
            raise NotSwitchable(f"{step}() is called from {len(calls)} places")
        if (loop := src.enclosing(calls[0], cst.For)) is None:
            raise NotSwitchable(f"{step}() is not called inside a `for` loop")
        args = [a.value for a in calls[0].args if a.keyword is None]
        mapping = {p: (a.value if isinstance(a, cst.Name) else None) for p, a in zip(params, args)}
    else:
        mapping, loop = {n: n for n in locals_}, region
    # The label: the one local name the loss reads outside the prediction.
    in_pred = {n.value for n in src.walk(pred) if isinstance(n, cst.Name)}
    labels = sorted(({n.value for n in src.walk(expr) if isinstance(n, cst.Name)} - in_pred) & locals_)
    if x in labels:
        raise NotSwitchable("the loss reads the model's input as well as its output")
    if len(labels) != 1:
        what = ", ".join(f"`{n}`" for n in labels) or "no label"
        raise NotSwitchable(f"the loss reads {what} besides the prediction (one label expected)")
    y = labels[0]
    # The loss for fit: `fn` for `fn(y, pred)` (a loss call given the labels as they come, by
    # position: as fit calls it), else the expression with y_true / y_pred in it.
    call = loss_call(src, expr, pred)
    if call is not None and all(a.keyword is None for a in call.args) and is_name(call.args[0].value, y):
        loss_code, loss_def = src.code(call.func), None
    else:
        swaps = [(pred, "y_pred"), *((n, "y_true") for n in src.walk(expr) if is_name(n, y))]
        loss_code, loss_def = "", src.splice(*src.span(expr), swaps)
    base = _loss_base(src, expr, y) if loss_def is not None else None
    data, epochs, block = _data(src, loop, mapping.get(x), mapping.get(y))
    return Loop(block, model, data, epochs, optimizer, loss_code, loss_def, base, compile_mode(src, region))


def _loss_expr(src: Src, region, loss: str, model: str) -> tuple[cst.BaseExpression, cst.CSTNode]:
    """The loss expression and the model's prediction in it (a call, or the name it is bound to)."""
    found = src.assignments(region, loss)
    if len(found) != 1:
        raise NotSwitchable(f"`{loss}` is not assigned once in the step")
    expr = found[0].value
    calls = [n for n in src.walk(expr) if _is_model_call(n, model)]
    if len(calls) == 1:
        return expr, calls[0]
    for n in src.walk(expr):
        if isinstance(n, cst.Name):
            bound = src.assignments(region, n.value)
            if len(bound) == 1 and _is_model_call(bound[0].value, model):
                return expr, n
    raise NotSwitchable(f"the loss does not use one call of `{model}`")


def _is_model_call(node: cst.CSTNode, model: str) -> bool:
    return isinstance(node, cst.Call) and is_name(node.func, model)


def _bound_names(src: Src, region: cst.CSTNode) -> set[str]:
    out: set[str] = set()
    if isinstance(region, cst.FunctionDef):
        out |= {p.name.value for p in region.params.params}
    for n in src.walk(region):
        if isinstance(n, cst.AssignTarget | cst.For | cst.WithItem):
            target = n.target if not isinstance(n, cst.WithItem) else (n.asname.name if n.asname else None)
            if target is not None:
                out |= {t.value for t in src.walk(target) if isinstance(t, cst.Name)}
    return out


_RESHAPES = {"reshape", "expand_dims", "squeeze", "one_hot"}


def _loss_base(src: Src, expr, y: str) -> str | None:
    """None when the loss reads the labels as they come (fit brings them to the
    predictions' rank first, as Keras does for a loss function); else the
    `Loss` class to subclass, whose `call` sees the labels unaligned, as the
    loop does (the loop reshapes them itself)."""
    for n in src.walk(expr):
        if not is_name(n, y):
            continue
        parent = src.parent(n)
        call = src.parent(src.parent(n)) if isinstance(parent, cst.Arg) else None
        if (isinstance(parent, cst.Subscript) and parent.value is n) or (
            isinstance(call, cst.Call) and last_name(call.func) in _RESHAPES
        ):
            break
    else:
        return None
    if src.keras_prefix is not None:
        return f"{src.keras_prefix}.losses.Loss"
    raise NotSwitchable("the loss reshapes the labels and the file imports no Keras to write a Loss class with")


# Modules whose functions compute elementwise: `tf.math.squared_difference(y, pred)` broadcasts.
_OP_MODULES = ("tensorflow", "tensorflow.math", "keras.ops", "numpy")


def loss_call(src: Src, expr: cst.BaseExpression, pred: cst.CSTNode) -> cst.Call | None:
    """The loss when it is a loss function or object applied to the labels and
    the prediction, `fn(labels, pred)` (two arguments, the prediction second,
    `fn` no op of `_OP_MODULES`): such a loss brings the two to one rank
    itself. None: a hand-written expression (check 7 judges its ranks)."""
    if not (
        isinstance(expr, cst.Call)
        and len(expr.args) == 2
        and not any(a.star for a in expr.args)
        and expr.args[1].value is pred
    ):
        return None
    return None if (src.resolved(expr.func) or "").rpartition(".")[0] in _OP_MODULES else expr


# -- the data --------------------------------------------------------------------------------


def _data(src: Src, loop: cst.For, x: str | None, y: str | None) -> tuple[str, str | None, cst.For]:
    """(the data expression, the epochs, the statement to wrap)."""
    target, it = loop.target, loop.iter
    if isinstance(it, cst.Call) and last_name(it.func) == "enumerate" and it.args:
        if not (isinstance(target, cst.Tuple | cst.List) and len(target.elements) == 2):
            raise NotSwitchable("the loop's enumerate() target is not (step, batch)")
        target, it = target.elements[1].value, it.args[0].value
    pair = tuple(e.value.value for e in target.elements) if m.matches(target, _NAME_PAIR) else None
    if pair is None or x is None or y is None:
        raise NotSwitchable("the loop does not iterate (x, y) batches of one dataset")
    if pair != (x, y):
        raise NotSwitchable(f"the step takes ({x}, {y}) but the loop yields ({pair[0]}, {pair[1]})")
    if isinstance(it, cst.Call) and last_name(it.func) in ("range", "zip", "iter"):
        raise NotSwitchable(f"the loop iterates {last_name(it.func)}(...), not a dataset")
    bound = {n.value for n in src.walk(loop.target) if isinstance(n, cst.Name)}
    if bound & {n.value for n in src.walk(it) if isinstance(n, cst.Name)}:
        raise NotSwitchable("the data expression reads the loop's own names")
    # An epoch loop: `for epoch in range(E):` whose body is this loop (and prints/logging).
    suite = src.parent(loop)
    outer = src.parent(suite) if isinstance(suite, cst.IndentedBlock) else None
    if m.matches(outer, m.For(iter=m.Call(args=[m.DoNotCare()]))) and last_name(outer.iter.func) == "range":
        prints = m.SimpleStatementLine([m.ZeroOrMore(m.Expr())])
        if all(m.matches(s, prints) for s in outer.body.body if s is not loop):
            return src.code(it), src.code(outer.iter.args[0].value), outer  # type: ignore[union-attr]
    return src.code(it), None, loop


# -- train_on_batch and train_step ---------------------------------------------------------------


def _train_on_batch_loop(src: Src, call: cst.Call) -> Loop:
    model = call.func.value.value  # type: ignore[union-attr]
    if (loop := src.enclosing(call, cst.For)) is None:
        raise NotSwitchable("train_on_batch is not called inside a `for` loop")
    a, b = arg(call, 0, "x"), arg(call, 1, "y")
    if a is None or b is None or not isinstance(a.value, cst.Name) or not isinstance(b.value, cst.Name):
        raise NotSwitchable("train_on_batch is not called on two named batches (x, y)")
    if len([x for x in call.args if x.keyword is None]) > 2 or any(
        x.keyword is not None and x.keyword.value in ("sample_weight", "class_weight") for x in call.args
    ):
        raise NotSwitchable("train_on_batch takes weights fit would need too")
    data, epochs, block = _data(src, loop, a.value.value, b.value.value)
    return Loop(block, model, data, epochs)


def _train_step_override(src: Src, ctx: Context, fn: cst.FunctionDef) -> Edit | None:
    cls = src.enclosing(fn, cst.ClassDef)
    if cls is None or src.parent(src.parent(fn)) is not cls:
        return None
    if not any("Model" in (src.code(b.value)) for b in cls.bases):
        return None
    body = src.code(fn)
    if not any(k in body for k in ("self.compute_loss(", "self.compiled_loss(", "self.loss(")):
        why = "it computes its own loss, so Keras's train_step would not have the same one"
        ctx.skip(src.path, src.line(fn), _NOT_SWITCHABLE.format(form="a train_step override", why=why))
        return None
    indent = src.indent_of(fn) if not fn.decorators else None
    name = ctx.claim("custom_loop", "loop", group=True, path=src.path, line=src.line(fn))
    if name is None or indent is None:
        return None
    desc = f"{cls.name.value}.train_step overrides fit's step, the same math; off: Keras's own train_step"
    start, end = src.line(fn), src.end_line(fn)
    found = Found.of(name, desc, src.path, start)
    return Edit(start, end, indent, (BlockSeg(found, src.lines_text(start, end)),))


# -- the block -----------------------------------------------------------------------------------


def _edit(src: Src, ctx: Context, loop: Loop, form: str) -> Edit | None:
    unit = loop.block
    line = src.line(unit)
    if (indent := src.indent_of(unit)) is None:
        why = "its lines cannot be commented at its indentation"
        ctx.skip(src.path, line, _NOT_SWITCHABLE.format(form=form, why=why))
        return None
    if (name := ctx.claim("custom_loop", "loop", group=True, path=src.path, line=line)) is None:
        return None
    off = []
    loss = loop.loss
    if loop.loss_def is not None and loop.loss_base is not None:
        cls = src.fresh_name(("FitLoss", "LoopLoss"))
        off += [f"{indent}class {cls}({loop.loss_base}):\n", f"{indent}    def call(self, y_true, y_pred):\n"]
        off += [f"{indent}        return {loop.loss_def}\n", "\n"]
        loss = f"{cls}()"
    elif loop.loss_def is not None:
        loss = src.fresh_name(("fit_loss", "loop_loss"))
        off += [f"{indent}def {loss}(y_true, y_pred):\n", f"{indent}    return {loop.loss_def}\n", "\n"]
    if loop.optimizer is not None:
        mode = f", {loop.mode}" if loop.mode else ""
        off.append(f"{indent}{loop.model}.compile(optimizer={loop.optimizer}, loss={loss}{mode})\n")
    data = loop.data
    if loop.epochs is not None:
        # The loop starts a new pass (a new iterator, a reshuffle) per epoch; fit's epochs
        # over a dataset do not reshuffle the same way, a repeated dataset does.
        simple = all(c.isalnum() or c in "._()[], " for c in data) and not data.startswith("(")
        data = f"{data if simple else f'({data})'}.repeat({loop.epochs})"
    off.append(f"{indent}{loop.model}.fit({data}, epochs=1, verbose=0)\n")
    what = "model.fit over the same data" + (", optimizer and loss, in its compile mode" if loop.optimizer else "")
    desc = f"hand-written training loop ({form}) instead of fit, the same math; off: {what}"
    note = None if loop.loss_def is None else "the loop's loss expression wrapped as a Keras loss for fit"
    found = Found.of(name, desc, src.path, line, note)
    end = src.end_line(unit)
    return Edit(line, end, indent, (BlockSeg(found, src.lines_text(line, end), "".join(off)),))


# -- the compile mode ---------------------------------------------------------------------------
# The compile mode of a hand-written loop's step, for the fit that stands in
# for it (`Loop.mode`): toggling `custom_loop` must change the loop into
# fit and nothing else, so fit keeps the loop's compile mode (as toggling a
# strategy keeps the compile mode, Contract 3 "what actually ran").
#
# - a step run eagerly (an inline loop, a step function no `tf.function`
#   wraps) -> `run_eagerly=True`;
# - a step function wrapped by `tf.function` (a decorator, or
#   `step = tf.function(step)`) -> the graph, without XLA (`jit_compile=False`:
#   Keras's "auto" would pick XLA on a GPU where the loop's function does not);
# - the same with `jit_compile=True` -> `jit_compile=True`.
#
# The wrapper is a feature of its own (`tf_function`, `jit_compile`): in a
# variant with it OFF the step runs eagerly (or without XLA), so the mode is
# read from the step function when fit is compiled, not fixed from the source.


def compile_mode(src: Src, region: cst.CSTNode) -> str:
    """The keyword arguments of fit's `compile` that give it the mode of the
    loop's step (`region`: the step function, or the loop itself when the
    step is inline), as source text."""
    if not isinstance(region, cst.FunctionDef):
        return "run_eagerly=True"
    name = region.name.value
    # The `tf.function` expressions that wrap the step: its decorators, and `step = tf.function(step, ...)`.
    wrappers = [d.decorator for d in region.decorators if is_tf_function(d.decorator)]
    wrappers += [n.value for n in src.nodes(cst.Assign) if rebinds_itself(n) == name and is_tf_function(n.value)]
    if not wrappers:
        return "run_eagerly=True"
    eager = f'run_eagerly=not hasattr({name}, "get_concrete_function")'
    if any(jit_on(w, legacy=True) for w in wrappers):
        return f'{eager}, jit_compile=getattr({name}, "_jit_compile", None) is True'
    return f"{eager}, jit_compile=False"


# -- the step as facts for `tfrepro check` (check 7) -------------------------------------------
# The model call's `training=`, whether the loss is a Keras loss object or a
# hand-written expression, whether the step runs under `strategy.run` and
# averages over the global batch: read with the recogniser's own pieces.


@dataclass(frozen=True)
class StepFacts:
    """One GradientTape step as written: what `tfrepro check` judges."""

    line: int
    model: str
    training: bool | None  # the `training=` of the model call in the tape (None: not given)
    loss_object: bool  # `fn(labels, pred)` (`loss_call`), else a hand-written expression
    loss_code: str
    per_replica: bool  # the step runs under strategy.run
    global_average: bool  # the loss is averaged over the global batch (compute_average_loss, a division)


def step_facts(src: Src) -> list[StepFacts]:
    out = []
    for node in src.nodes(cst.Call):
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value in APPLY):
            continue
        try:
            region, grad, loss_name, model = step_region(src, node)
        except NotSwitchable:
            continue
        assigned = src.assignments(region, loss_name)
        code = src.code(assigned[-1].value) if assigned else ""
        calls = [n for n in src.walk(region) if _is_model_call(n, model)]
        training = arg(calls[0], None, "training") if calls else None
        value = None if training is None else {"True": True, "False": False}.get(src.code(training.value))
        try:
            loss_object = loss_call(src, *_loss_expr(src, region, loss_name, model)) is not None
        except NotSwitchable:
            loss_object = True  # not identified: no claim about ranks
        runs = isinstance(region, cst.FunctionDef) and any(
            last_name(n.func) == "run" and n.args and is_name(n.args[0].value, region.name.value)
            for n in src.nodes(cst.Call)
        )
        global_avg = "compute_average_loss" in code or "global_batch" in code.lower() or "/" in code
        out.append(StepFacts(src.line(grad), model, value, loss_object, code, runs, global_avg))
    return out
