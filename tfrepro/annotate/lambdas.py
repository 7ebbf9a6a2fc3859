"""A `Lambda` layer over the project's own code is a custom layer.

`keras.layers.Lambda(fn)` runs the project's function `fn` (a `def` of the
file, or a `lambda`) as a layer: the same code a `Layer` subclass's `call`
would hold (keras-team/keras#9097: a Euclidean distance of two embeddings,
`sqrt(sum(square(x - y)))`, whose gradient is NaN at distance 0). It is
found as a feature of the `custom_layer` family named after the function
(`custom_layer_euclidean_distance`), and its OFF stand-in is chosen as for a
custom layer class by how it is called (annotate/standins.py): on a list or
a dict of tensors, the concatenation of its inputs; on one tensor,
`Identity()`, with a note asking the user to choose the stock layer.

Pure: source in, (feature name, stand-in, what it is, note) out.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tfrepro.annotate.source import Src, arg, assigned_name, dotted, literal, snake
from tfrepro.annotate.standins import concat_standin, structured_input


@dataclass(frozen=True)
class LambdaLayer:
    feature: str  # custom_layer_<function>
    what: str  # `Lambda(euclidean_distance)`, for the description
    standin: str  # the expression that replaces the Lambda(...) construction
    stock: str  # what the stand-in is, for the description
    note: str | None  # asks the user to choose, when the stand-in is a guess


def is_lambda_layer(src: Src, call: cst.Call, prefix: str | None) -> bool:
    d = dotted(call.func) or ""
    if prefix is None or not (d == "Lambda" or d.endswith("layers.Lambda")):
        return False
    # A bare `Lambda` must come from `from keras.layers import Lambda`.
    return d != "Lambda" or any(t.endswith("layers.Lambda") for t in src.import_aliases().values())


def _name(src: Src, call: cst.Call, fn: cst.BaseExpression) -> str | None:
    """The function's name; for a `lambda`, the layer's `name=` or the name it is assigned to."""
    if isinstance(fn, cst.Name):
        defined = any(isinstance(n, cst.FunctionDef) and n.name.value == fn.value for n in src.walk())
        return fn.value if defined else None
    given = arg(call, None, "name")
    if given is not None and isinstance(literal(given.value), str):
        return str(literal(given.value))
    return assigned_name(src.enclosing(call, (cst.Assign, cst.SimpleStatementLine))) or "lambda"


def lambda_layer(src: Src, call: cst.Call, prefix: str) -> LambdaLayer | str | None:
    """The custom layer a `Lambda(...)` construction is; a reason (str) when
    it cannot be switched; None when it runs no code of the project's."""
    fn = arg(call, 0, "function")
    if fn is None or not isinstance(fn.value, cst.Name | cst.Lambda):
        return None
    if (name := _name(src, call, fn.value)) is None:
        return None  # a function from a library (`Lambda(tf.nn.relu)`): not the project's code
    what = f"Lambda({fn.value.value})" if isinstance(fn.value, cst.Name) else f"Lambda({name})"
    feature = "custom_layer_" + snake(name)
    if (shape := structured_input(src, call)) is not None:
        if (tf := src.tf_alias()) is None:
            return f"{what} takes a {shape} of inputs and the file imports no TensorFlow to join them with"
        return LambdaLayer(
            feature, what, concat_standin(prefix, tf), f"its {shape} of inputs concatenated (float32)", None
        )
    note = (
        f"no obvious stock layer for {what}: OFF uses Identity(); "
        "edit the else part to choose the stock layer it should be compared with"
    )
    return LambdaLayer(feature, what, f"{prefix}.Identity()", "Identity (the function not applied)", note)
