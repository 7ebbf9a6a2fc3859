"""Recognisers for features that live in one statement: the statement is
wrapped as it is (ON) and, when the feature has an OFF form, the else part is
the same statement with one expression replaced.

precision policy, LossScaleOptimizer, distribution strategy, `jit_compile`,
`run_eagerly`, `run_functions_eagerly`, `tf.function`, XLA auto-jit, memory
growth, `os.environ["XLA_FLAGS"]` / `TF_XLA_FLAGS`, tf.data parallel reads and non-determinism, learning-rate schedules
and the project's own layers. (tf.data chains and callbacks need the
statement rebuilt: `rebuild.py`.)
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tfrepro import catalog
from tfrepro.annotate.custom import LayerClass, custom_layer, is_lambda_layer, lambda_layer_candidates
from tfrepro.annotate.model import BlockSeg, Candidate, Context, Edit, Found, append_stmt, split_list, statement_unit
from tfrepro.annotate.model import candidate as _c
from tfrepro.annotate.source import Src, arg, dotted, is_tf_function, jit_on, last_name, literal, rebinds_itself

SCHEDULES = {
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
}
_LOSS_SCALE_METHODS = ("get_scaled_loss", "get_unscaled_gradients", "scale_loss")
_ONE_ASSIGNMENT = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget()])])  # `x = ...` alone on its line
_DETERMINISTIC = m.Attribute(attr=m.Name("experimental_deterministic") | m.Name("deterministic"))
_ONE_INDEX = m.Subscript(slice=[m.SubscriptElement(m.Index())])  # `x[key]`


def find_candidates(src: Src, layer_classes: dict[str, LayerClass], ctx: Context) -> list[Candidate]:
    out: list[Candidate] = []
    for node in src.nodes(cst.Call, cst.Decorator, cst.SimpleStatementLine):
        if isinstance(node, cst.Call):
            out.extend(_from_call(src, ctx, node, layer_classes))
        elif isinstance(node, cst.Decorator) and is_tf_function(node.decorator) and not jit_on(node.decorator):
            out.append(_c(node, "tf_function"))  # with jit_compile=True the jit_compile feature takes the decorator
        elif m.matches(node, _ONE_ASSIGNMENT):
            # `options.experimental_deterministic = False`: tf.data may reorder elements.
            target, value = node.body[0].targets[0].target, node.body[0].value  # type: ignore[attr-defined]
            if m.matches(target, _DETERMINISTIC) and literal(value) is False:
                out.append(_c(node, "nondeterministic_data"))
            elif m.matches(target, _ONE_INDEX) and (dotted(target.value) or "").endswith("environ"):
                # `os.environ["XLA_FLAGS"] = ...` (or TF_XLA_FLAGS)
                if (var := literal(target.slice[0].slice.value)) in catalog.XLA_VARS:
                    out.append(_c(node, "xla_flags", var=var))
    return out


def _whole_call(src: Src, ctx: Context, call: cst.Call, what: str, feature: str, **fields: str) -> list[Candidate]:
    """The statement that is exactly `call` (an expression statement) as a candidate for `feature`."""
    if (unit := statement_unit(src, ctx, call, what)) is None:
        return []
    if not m.matches(unit, m.SimpleStatementLine(body=[m.Expr(m.MatchIfTrue(lambda v: v is call)), m.ZeroOrMore()])):
        ctx.skip(src.path, src.line(call), f"{what} is used inside a larger expression: not marked")
        return []
    return [_c(unit, feature, **fields)]


def _from_call(src: Src, ctx: Context, call: cst.Call, layer_classes: dict[str, LayerClass]) -> list[Candidate]:
    out: list[Candidate] = []
    prefix = src.layers_prefix
    d = dotted(call.func) or ""
    name = last_name(call.func) or ""
    first = arg(call, 0, None)

    if catalog.sets_policy(d or name):
        value = literal(first.value if first else None)
        if value not in ("float32", None):
            policy = value if isinstance(value, str) else "mixed precision"
            out += _whole_call(src, ctx, call, "precision policy call", "mixed_precision", policy=policy)
    elif name == "LossScaleOptimizer":
        out.extend(_loss_scale(src, ctx, call))
    elif (strategy := catalog.STRATEGIES.get(name)) and (
        "distribute" in d or "distribute" in src.import_aliases.get(d, "")
    ):
        parts = d.split(".")  # OFF: the default strategy's getter
        if "distribute" in parts[:-1]:  # `tf.distribute.experimental.TPUStrategy` -> `tf.distribute.get_strategy()`
            getter = ".".join(parts[: parts.index("distribute") + 1]) + ".get_strategy()"
        elif tf := src.alias("tensorflow"):
            getter = f"{tf}.distribute.get_strategy()"
        else:
            ctx.skip(src.path, src.line(call), f"{name}: no `import tensorflow` to write the default strategy with")
            return out
        if (unit := statement_unit(src, ctx, call, name)) is not None:
            out.append(_c(unit, strategy, call, getter, cls=name))
    elif is_tf_function(call):
        # `f = tf.function(f, ...)`: graph compilation of a step function (a decorator: `find_candidates`).
        # `step = tf.function(other)` has no OFF that keeps `step` defined; with `jit_compile=True` the
        # jit_compile feature takes the statement.
        unit = src.statement(call)
        whole = m.SimpleStatementLine([m.Assign(value=m.MatchIfTrue(lambda v: v is call))])
        if m.matches(unit, whole) and rebinds_itself(unit.body[0]) and not jit_on(call):  # type: ignore[union-attr]
            out.append(_c(unit, "tf_function"))
    elif name == "run_functions_eagerly":
        if first is None or literal(first.value) is not False:
            out += _whole_call(src, ctx, call, name, "eager_debug", how="tf.functions run eagerly, debugging")
    elif name == "set_jit" and "optimizer" in d:
        if first is None or literal(first.value) not in (False, None):
            out += _whole_call(src, ctx, call, name, "xla_auto_jit")
    elif name == "set_memory_growth":
        if (flag := arg(call, 1, "enable")) is None or literal(flag.value) is not False:
            out += _whole_call(src, ctx, call, name, "memory_growth")
    elif name in SCHEDULES:
        out.extend(_schedule(src, ctx, call, name))
    elif name in layer_classes and isinstance(call.func, (cst.Name, cst.Attribute)):
        out.extend(custom_layer(src, ctx, call, layer_classes[name], prefix))
    elif is_lambda_layer(src, call, prefix):
        out.extend(lambda_layer_candidates(src, ctx, call, prefix))
    elif catalog.RANDOM_LAYER_RE.match(name) and prefix is not None and (d == name or "layers" in d):
        if (unit := statement_unit(src, ctx, call, f"{name}(...)")) is not None:
            out.append(_c(unit, "random_augmentation", call, f"{prefix}.Identity()", cls=name))

    return out + _from_keywords(src, ctx, call, name)


def _loss_scale(src: Src, ctx: Context, call: cst.Call) -> list[Candidate]:
    """A LossScaleOptimizer: OFF is its inner optimizer, unless the code calls
    its loss-scaling methods."""
    inner = arg(call, 0, "inner_optimizer") or arg(call, None, "optimizer")
    if any(f".{x}(" in src.text for x in _LOSS_SCALE_METHODS):
        why = "the code calls its loss-scaling methods, so it stays as written (it is harmless without mixed precision)"
        ctx.skip(src.path, src.line(call), f"LossScaleOptimizer: {why}")
        return []
    unit = statement_unit(src, ctx, call, "LossScaleOptimizer") if inner is not None else None
    if unit is None:
        return []
    desc = "loss scaling for mixed precision; off: the plain optimizer"
    return [_c(unit, "mixed_precision", call, src.code(inner.value), desc=desc)]


def _from_keywords(src: Src, ctx: Context, call: cst.Call, name: str) -> list[Candidate]:
    """Features given as keyword arguments of the call (num_parallel_reads,
    jit_compile, run_eagerly, the catalog's keywords)."""
    out: list[Candidate] = []
    for a in call.args:
        kw, value = (a.keyword.value if a.keyword is not None else None), literal(a.value)
        if kw == "num_parallel_reads" and name.endswith("Dataset") and value not in (None, 1):
            feature, what, fields = "parallel_reads", f"{name}(num_parallel_reads=...)", {}
        elif kw in ("jit_compile", "run_eagerly") and value not in (False, None, "auto"):
            feature = "jit_compile" if kw == "jit_compile" else "eager_debug"
            what, fields = f"{kw}={src.code(a.value)}", {"how": "run_eagerly; off: run_eagerly=False"}
        elif kw in catalog.KEYWORDS and value not in (None, 0, 0.0, False):
            feature, what, fields = catalog.KEYWORDS[kw], f"{kw}={src.code(a.value)}", {"arg": kw}
        else:
            continue
        if (unit := statement_unit(src, ctx, a, what)) is not None:
            out.append(_c(unit, feature, a.value, catalog.CATALOG[feature].off_code, **fields))
    return out


def _schedule(src: Src, ctx: Context, call: cst.Call, name: str) -> list[Candidate]:
    if name == "PiecewiseConstantDecay":
        if (values := arg(call, 1, "values")) is None:
            constant = None
        elif isinstance(values.value, (cst.List, cst.Tuple)) and values.value.elements:
            constant = src.code(values.value.elements[0].value)
        else:
            constant = f"{src.code(values.value)}[0]"
    else:
        target = arg(call, None, "warmup_target") or arg(call, 0, "initial_learning_rate")
        constant = src.code(target.value) if target is not None else None
    if constant is None:
        ctx.skip(src.path, src.line(call), f"{name}: its starting learning rate is not given; not marked")
        return []
    if (unit := statement_unit(src, ctx, call, name)) is None:
        return []
    # A schedule that is called by the code (to log the rate) cannot become a float.
    if isinstance(unit, cst.SimpleStatementLine) and isinstance(unit.body[0], cst.Assign):
        targets = {t.target.value for t in unit.body[0].targets if isinstance(t.target, cst.Name)}
        for n in src.nodes(cst.Call):
            if isinstance(n.func, cst.Name) and n.func.value in targets:
                why = "schedule is called as a function here; a constant rate could not stand in for it: not marked"
                ctx.skip(src.path, src.line(n), f"{name} {why}")
                return []
    return [_c(unit, "lr_schedule", call, constant, cls=name, constant=constant)]


def candidates_to_edits(src: Src, ctx: Context, cands: list[Candidate]) -> list[Edit]:
    """One edit per statement; the first feature of a statement wins, the
    others are reported (a statement belongs to one block)."""
    by_unit: dict[int, list[Candidate]] = {}
    for c in cands:
        by_unit.setdefault(id(c.unit), []).append(c)
    edits: list[Edit] = []
    for same_unit in sorted(by_unit.values(), key=lambda g: src.span(g[0].unit)[0]):
        group = sorted(same_unit, key=lambda c: src.span(c.node or c.unit)[0])
        head, unit = group[0], group[0].unit
        indent = src.indent_of(unit)
        line = src.line(unit)
        if indent is None:
            why = "the statement's lines cannot be commented at its indentation (a continuation line is indented less)"
            ctx.skip(src.path, line, f"{head.base}: {why}: not marked")
            continue
        if len({c.base for c in group}) > 1 and (split := _sequential_split(src, ctx, unit, indent, group)) is not None:
            edits.append(split)
            continue
        if (name := ctx.claim(head.base, head.kind, group=True, path=src.path, line=line)) is None:
            continue
        same = [c for c in group if c.base == head.base]
        for other in group:
            if other.base != head.base:
                ctx.skip(
                    src.path,
                    src.line(other.node or other.unit),
                    f"{other.base} shares a statement with {name}: not marked (split the statement)",
                )
        start, end = line, src.end_line(unit)
        swaps = [(c.node, c.replacement or "") for c in same if c.node is not None]
        on, off = src.lines_text(start, end), (src.lines_text(start, end, swaps) if swaps else None)
        found = Found.of(name, head.description, src.path, line, head.note)
        edits.append(Edit(start, end, indent, (BlockSeg(found, on, off),)))
    return edits


def _sequential_split(src: Src, ctx: Context, unit: cst.CSTNode, indent: str, group: list[Candidate]) -> Edit | None:
    """Several custom layers in one `Sequential([...])`: rebuild the list with
    appends so that each layer gets its own block (same layers, same order)."""
    if not all(c.kind == "custom_layer" and c.node is not None for c in group):
        return None
    elements = [src.parent(c.node) for c in group]  # type: ignore[arg-type]
    lists = {src.parent(el) for el in elements}  # type: ignore[arg-type]
    if not all(isinstance(el, cst.Element) for el in elements) or len(lists) != 1:
        return None
    lst = lists.pop()
    argnode = src.parent(lst) if isinstance(lst, cst.List) else None
    call = src.parent(argnode) if isinstance(argnode, cst.Arg) else None
    if (
        not isinstance(call, cst.Call)
        or last_name(call.func) != "Sequential"
        or any(isinstance(e, cst.StarredElement) for e in lst.elements)
    ):
        return None
    by_node = {id(c.node): c for c in group}
    var = src.fresh_name(("model_layers", "stack"))

    def segment(el: cst.Element) -> str | BlockSeg:
        on = append_stmt(src, indent, var, el.value)
        if (c := by_node.get(id(el.value))) is None:
            return on
        if (name := ctx.claim(c.base, c.kind, group=True, path=src.path, line=src.line(el.value))) is None:
            return on
        found = Found.of(name, c.description, src.path, src.line(el.value), c.note)
        return BlockSeg(found, on, append_stmt(src, indent, var, el.value, c.replacement))

    segs = split_list(src, lst, indent, segment)
    start, end = src.line(unit), src.end_line(unit)
    edit = Edit(start, end, indent, (f"{indent}{var} = []\n", *segs, src.lines_text(start, end, [(lst, var)])))
    return edit if edit.found else None
