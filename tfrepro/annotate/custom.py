"""Custom layers as features: the layer's construction is replaced by a
stock layer or a stand-in of the right structure (annotate/layers.py,
annotate/standins.py).

A `Lambda` layer over the project's own code is a custom layer too:
`keras.layers.Lambda(fn)` runs the project's function `fn` (a `def` of the
file, or a `lambda`) as a layer: the same code a `Layer` subclass's `call`
would hold (keras-team/keras#9097: a Euclidean distance of two embeddings,
`sqrt(sum(square(x - y)))`, whose gradient is NaN at distance 0). It is
found as a feature of the `custom_layer` family named after the function
(`custom_layer_euclidean_distance`), and its OFF stand-in is chosen as for a
custom layer class by how it is called: on a list or a dict of tensors, the
stand-in of annotate/standins.py; on one tensor, `Identity()`, with a note
asking the user to choose the stock layer.
"""

from __future__ import annotations

import libcst as cst

from tfrepro.annotate.layers import LayerClass, identity_note, stock_equivalent
from tfrepro.annotate.model import Candidate, Context, statement_unit
from tfrepro.annotate.model import candidate as _c
from tfrepro.annotate.source import Src, arg, assigned_name, dotted, literal
from tfrepro.annotate.standins import AVERAGED, layer_inputs, list_standin, structured_standin
from tfrepro.catalog import snake


def custom_layer(src: Src, ctx: Context, call: cst.Call, cls: LayerClass, prefix: str | None) -> list[Candidate]:
    if prefix is None:
        ctx.skip(src.path, src.line(call), f"{cls.name}: this file imports no Keras to name a stock layer with")
        return []
    if cls.adds_loss:
        why = "adds to the loss (add_loss): no stock layer can stand in for it, not marked"
        ctx.skip(src.path, src.line(call), f"{cls.name} {why}")
        return []
    if (unit := statement_unit(src, ctx, call, f"{cls.name}(...)")) is None:
        return []
    expr, what, note = stock_equivalent(src, call, cls, prefix)
    if isinstance(structured := structured_standin(src, call, prefix), str):
        ctx.skip(src.path, src.line(call), f"{cls.name} {structured}")
        return []
    if structured is not None:  # called on a dict/list: one tensor from many (annotate/standins.py)
        (expr, what), note = structured, None
    tf = src.tf_alias()
    several = layer_inputs(src, call) or []
    if note is not None and len(several) > 1 and tf is not None and not any(a.star for a in several):
        # `Dist()(a, b)`: the whole call becomes the list stand-in over its inputs
        listed = ", ".join(src.code(a.value) for a in several)
        what = f"its {len(several)} inputs {AVERAGED}"
        stand_in = f"{list_standin(prefix, tf)}([{listed}])"
        return [_c(unit, cls.feature, src.parent(call), stand_in, cls=cls.name, stock=what)]
    if note is not None and len(several) > 1:
        why = "takes several inputs and has no obvious stock equivalent: not marked (write its block by hand)"
        ctx.skip(src.path, src.line(call), f"{cls.name} {why}")
        return []
    return [_c(unit, cls.feature, call, expr, note=note, cls=cls.name, stock=what)]


def is_lambda_layer(src: Src, call: cst.Call, prefix: str | None) -> bool:
    d = dotted(call.func) or ""
    if prefix is None or not (d == "Lambda" or d.endswith("layers.Lambda")):
        return False
    # A bare `Lambda` must come from `from keras.layers import Lambda`.
    return d != "Lambda" or any(t.endswith("layers.Lambda") for t in src.import_aliases.values())


def _name(src: Src, call: cst.Call, fn: cst.BaseExpression) -> str | None:
    """The function's name; for a `lambda`, the layer's `name=` or the name it is assigned to."""
    if isinstance(fn, cst.Name):
        defined = any(n.name.value == fn.value for n in src.nodes(cst.FunctionDef))
        return fn.value if defined else None
    given = arg(call, None, "name")
    if given is not None and isinstance(literal(given.value), str):
        return str(literal(given.value))
    return assigned_name(src.enclosing(call, (cst.Assign, cst.AnnAssign, cst.SimpleStatementLine))) or "lambda"


def lambda_layer_candidates(src: Src, ctx: Context, call: cst.Call, prefix: str) -> list[Candidate]:
    """The custom layer a `Lambda(...)` construction is (none when it runs no
    code of the project's; a reason is reported when it cannot be switched)."""
    fn = arg(call, 0, "function")
    if fn is None or not isinstance(fn.value, cst.Name | cst.Lambda):
        return []
    if (name := _name(src, call, fn.value)) is None:
        return []  # a function from a library (`Lambda(tf.nn.relu)`): not the project's code
    what = f"Lambda({fn.value.value})" if isinstance(fn.value, cst.Name) else f"Lambda({name})"
    feature = "custom_layer_" + snake(name)
    if isinstance(structured := structured_standin(src, call, prefix), str):
        ctx.skip(src.path, src.line(call), f"{what} {structured}")
        return []
    if structured is not None:
        (standin, stock), note = structured, None
    else:
        standin, stock = f"{prefix}.Identity()", "Identity (the function not applied)"
        note = identity_note(what)
    if (unit := statement_unit(src, ctx, call, f"{what}(...)")) is None:
        return []
    return [_c(unit, feature, call, standin, note=note, cls=what, stock=stock)]
