"""A layer's OFF stand-in checked against how the layer is called.

A stock layer or `Identity()` stands in for a custom layer called on one
tensor. A layer called on a dict or a list of inputs (a feature layer over
named columns) returns one tensor from many: `Identity` would hand the next
layer the dict itself (`KeyError: -1`). Its stand-in is the pass-through of
the right structure: every input, cast to float32 and flattened per example,
concatenated into one tensor (the next Dense layer takes any width). A
layer called on a list of inputs of one shape (a sampling or merge layer:
`Sampling()([z_mean, z_log_var])`) returns that shape, and what takes its
output may be built for it (a decoder model with `Input(shape=(2,))`): its
stand-in averages them, as Keras's own `Average` merge does, and
concatenates only inputs of different shapes. The
expression uses the script's own TensorFlow import, so the variant still
runs with TensorFlow alone.
"""

from __future__ import annotations

import libcst as cst

from tfrepro.annotate.source import Src, is_name


def layer_inputs(src: Src, call: cst.Call) -> list[cst.Arg] | None:
    """The arguments but keywords that `call` (a layer's construction) is
    called on (`Dist()(a, b)`: a, b), None when it is not called there."""
    outer = src.parent(call)
    return [a for a in outer.args if a.keyword is None] if isinstance(outer, cst.Call) and outer.func is call else None


def structured_input(src: Src, call: cst.Call) -> str | None:
    """'dict' or 'list' when `call` (the layer's construction) is called on
    a dict/list literal, or on a name whose one assignment in scope is one
    (or `dict(...)`, or starts empty and is filled by item assignment); else None."""
    pos = [a.value for a in layer_inputs(src, call) or () if not a.star]
    if len(pos) != 1:
        return None
    value = pos[0]
    if isinstance(value, cst.Name):
        value = _assigned(src, src.scope(call), value.value) or _assigned(src, src.module, value.value)
    if isinstance(value, (cst.Dict, cst.DictComp)) or (isinstance(value, cst.Call) and is_name(value.func, "dict")):
        return "dict"
    if isinstance(value, (cst.List, cst.Tuple, cst.ListComp)):
        return "list"
    return None


def _assigned(src: Src, scope: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    values = [n.value for n in src.assignments(scope, name) if src.scope(n) is scope]
    return values[0] if len(values) == 1 else None


AVERAGED = "averaged if of one shape, else concatenated (float32)"


def structured_standin(src: Src, call: cst.Call, prefix: str) -> tuple[str, str] | str | None:
    """(the stand-in, what it is in words) of a layer called on a dict or a
    list of inputs (`structured_input`), a layer class's and a `Lambda`'s
    alike (annotate/custom.py); why it is not marked when the file imports
    no TensorFlow to write it with; None when the layer is called on one
    tensor."""
    if (shape := structured_input(src, call)) is None:
        return None
    if (tf := src.tf_alias()) is None:
        return f"takes a {shape} of inputs and the file imports no TensorFlow to join them with: not marked"
    if shape == "dict":
        return _concat_standin(prefix, tf), "its dict of inputs concatenated (float32)"
    return list_standin(prefix, tf), f"its list of inputs {AVERAGED}"


def _concat_standin(prefix: str, tf: str) -> str:
    """A layer that turns any structure of inputs into one float32 tensor."""
    return (
        f"{prefix}.Lambda(lambda inputs: {tf}.concat("
        f'[{tf}.reshape({tf}.cast(t, "float32"), (-1, t.shape[1:].num_elements())) for t in {tf}.nest.flatten(inputs)], '
        "axis=-1))"
    )


def list_standin(prefix: str, tf: str) -> str:
    """A layer that turns a list of inputs into one float32 tensor: their
    average when they share a shape (the width a merge layer keeps), else
    their flattened concatenation."""
    flat = f'[{tf}.cast(t, "float32") for t in {tf}.nest.flatten(inputs)]'
    concat = f"{tf}.concat([{tf}.reshape(t, (-1, t.shape[1:].num_elements())) for t in ts], axis=-1)"
    return (
        f"{prefix}.Lambda(lambda inputs: (lambda ts: {tf}.add_n(ts) / len(ts) "
        f"if all(t.shape == ts[0].shape for t in ts) else {concat})({flat}))"
    )
