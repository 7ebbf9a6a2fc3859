"""Custom layers as features: the layer's construction is replaced by a
stock layer or a stand-in of the right structure (annotate/layers.py,
annotate/standins.py; a `Lambda` layer: annotate/lambdas.py)."""

from __future__ import annotations

import libcst as cst

from tfrepro.annotate.layers import LayerClass, stock_equivalent
from tfrepro.annotate.model import Candidate, Context, statement_unit
from tfrepro.annotate.model import candidate as _c
from tfrepro.annotate.source import Src
from tfrepro.annotate.standins import AVERAGED, layer_inputs, list_standin, structured_standin


def custom_layer(src: Src, ctx: Context, call: cst.Call, cls: LayerClass, prefix: str | None) -> list[Candidate]:
    if prefix is None:
        ctx.skip(src.path, src.line(call), f"{cls.name}: this file imports no Keras to name a stock layer with")
        return []
    if cls.adds_loss:
        ctx.skip(
            src.path,
            src.line(call),
            f"{cls.name} adds to the loss (add_loss): no stock layer can stand in for it, not marked",
        )
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
        ctx.skip(
            src.path,
            src.line(call),
            f"{cls.name} takes several inputs and has no obvious stock "
            "equivalent: not marked (write its block by hand)",
        )
        return []
    return [_c(unit, cls.feature, call, expr, note=note, cls=cls.name, stock=what)]
