"""Custom layers as features: the project's own Keras `Layer` subclasses
(collected over the project's files), and the layer's construction replaced
by a stock layer or a stand-in of the right structure when its feature is OFF.

"Obvious" stock equivalents, in order: the stock layer the class subclasses
(when it keeps the stock constructor), then a layer its name says it is
(`...LayerNorm` -> `LayerNormalization`); otherwise `Identity()` with a note
asking the user to choose.

A `Lambda` layer over the project's own code is a custom layer too:
`keras.layers.Lambda(fn)` runs the project's function `fn` (a `def` of the
file, or a `lambda`) as a layer: the same code a `Layer` subclass's `call`
would hold (keras-team/keras#9097: a Euclidean distance of two embeddings,
`sqrt(sum(square(x - y)))`, whose gradient is NaN at distance 0). It is
found as a feature of the `custom_layer` family named after the function
(`custom_layer_euclidean_distance`), and its OFF stand-in is chosen as for a
custom layer class by how it is called: on a list or a dict of tensors, the
stand-in below; on one tensor, `Identity()`, with a note asking the user to
choose the stock layer.

A layer called on a dict or a list of inputs (a feature layer over named
columns) returns one tensor from many: `Identity` would hand the next layer
the dict itself (`KeyError: -1`). Its stand-in is the pass-through of the
right structure: every input, cast to float32 and flattened per example,
concatenated into one tensor (the next Dense layer takes any width). A layer
called on a list of inputs of one shape (a sampling or merge layer:
`Sampling()([z_mean, z_log_var])`) returns that shape, and what takes its
output may be built for it (a decoder model with `Input(shape=(2,))`): its
stand-in averages them, as Keras's own `Average` merge does, and concatenates
only inputs of different shapes. The expression uses the script's own
TensorFlow import, so the variant still runs with TensorFlow alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import libcst as cst
import libcst.matchers as m

from tfrepro.annotate.model import Candidate, Context, statement_unit
from tfrepro.annotate.model import candidate as _c
from tfrepro.annotate.source import Src, arg, assigned_name, dotted, is_name, last_name, literal
from tfrepro.catalog import snake

_NOT_LAYERS = {"Model", "Sequential", "Functional", "Layer", "InputSpec", "Callback"}
_ALWAYS_KW = ("name", "dtype")
_IDENTITY_NOTE = (
    "no obvious stock layer for {}: OFF uses Identity(); "
    "edit the else part to choose the stock layer it should be compared with"
)

# (pattern on the snake-cased class name, stock class, its positional
# parameters (all required), other keywords it accepts)
_TABLE: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (r"layer_?norm", "LayerNormalization", (), ("axis", "epsilon")),
    (r"batch_?norm", "BatchNormalization", (), ("axis", "epsilon", "momentum")),
    (r"dense|linear", "Dense", ("units",), ("activation", "use_bias")),
    (r"dropout", "Dropout", ("rate",), ()),
    (r"softmax", "Softmax", (), ("axis",)),
    (r"embedding", "Embedding", ("input_dim", "output_dim"), ()),
    (r"(^|_)relu", "ReLU", (), ()),
)


@dataclass(frozen=True)
class LayerClass:
    """One class statement of a file (`class_defs`); among the Layer
    subclasses (`collect_layer_classes`), with its `stock_base`."""

    name: str
    bases: tuple[tuple[bool, str | None, str | None], ...]  # (a Keras layer base, its stock layer, last name)
    init_params: tuple[str, ...] | None  # None: no __init__ of its own
    adds_loss: bool = False  # part of the objective (`self.add_loss`): no stand-in
    stock_base: str | None = None  # e.g. "Dense" for `class MyDense(layers.Dense)`

    @property
    def feature(self) -> str:
        return "custom_layer_" + snake(self.name)


def _keras_layer_base(src: Src, base: cst.BaseExpression) -> tuple[bool, str | None]:
    """(is a Keras layer base, stock layer name if a stock layer other than Layer)."""
    if (d := dotted(base)) is None or (full := src.resolved(base)) is None:
        return False, None
    parts = d.split(".")
    if full.endswith(".Layer") and ("keras" in full or "layers" in full):
        return True, None
    if (
        ".layers." in full + "."
        and parts[-1][:1].isupper()
        and parts[-1] not in _NOT_LAYERS
        and ("keras" in full or parts[0] == "layers")
    ):
        return True, parts[-1]
    return False, None


def class_defs(src: Src) -> tuple[LayerClass, ...]:
    """Every class statement of `src`, in document order (one walk of the file)."""
    out = []
    for node in src.nodes(cst.ClassDef):
        bases = tuple((*_keras_layer_base(src, b.value), last_name(b.value)) for b in node.bases)
        init = next((s for s in node.body.body if m.matches(s, m.FunctionDef(m.Name("__init__")))), None)
        params = None if init is None else (*init.params.params, *init.params.kwonly_params)
        names = None if params is None else tuple(p.name.value for p in params if p.name.value != "self")
        out.append(LayerClass(node.name.value, bases, names, "add_loss(" in src.code(node)))
    return tuple(out)


def collect_layer_classes(defs: Iterable[LayerClass]) -> dict[str, LayerClass]:
    """Every `Layer` subclass among `defs`, direct or through another; a name
    defined twice takes the first definition that is a layer."""
    classes = list(defs)
    found: dict[str, LayerClass] = {}
    for _ in classes:  # a pass finds the layers based on one found by the pass before: one pass per class at most
        for c in classes:
            if c.name in found:
                continue
            # its layer bases' stock layers (None: Layer, or a layer class of the project's); a Keras base
            # that is no layer (Model, Callback...) makes it none
            stocks = [st if ok else None for ok, st, parent in c.bases if ok or parent in found]
            if stocks and not any(parent in _NOT_LAYERS - {"Layer"} and not ok for ok, _, parent in c.bases):
                found[c.name] = replace(c, stock_base=stocks[-1])
    return found


def stock_equivalent(src: Src, call: cst.Call, cls: LayerClass, prefix: str) -> tuple[str, str, str | None]:
    """(replacement expression, short description, note for the user or None)."""
    if cls.stock_base and cls.init_params is None:
        args = src.text[src.span(call.func)[1] : src.span(call)[1]]
        return f"{prefix}.{cls.stock_base}{args}", f"stock {cls.stock_base}", None
    key = snake(cls.name)
    given = _named_args(src, call, cls)
    for pattern, stock, positional, keywords in _TABLE:
        if not re.search(pattern, key):
            continue
        if given is None:
            break
        kept = {pname: given.pop(i) for i, pname in enumerate(positional) if i in given}
        kept.update({k: given[k] for k in (*positional, *keywords, *_ALWAYS_KW) if k in given})
        if any(r not in kept for r in positional):
            break
        args = ", ".join(f"{k}={v}" for k, v in kept.items())
        return f"{prefix}.{stock}({args})", f"stock {stock}", None
    name_kw = f"name={given['name']}" if given and "name" in given else ""
    return f"{prefix}.Identity({name_kw})", "Identity (no obvious stock equivalent)", _IDENTITY_NOTE.format(cls.name)


def _named_args(src: Src, call: cst.Call, cls: LayerClass) -> dict | None:
    """Arguments of the call: keyword -> code, and positional index -> code
    for positionals the class's own __init__ cannot name. None: *args/**kw."""
    if any(a.star for a in call.args):
        return None
    names = cls.init_params or ()
    positional = [src.code(a.value) for a in call.args if a.keyword is None]
    out: dict = {(names[i] if i < len(names) else i): code for i, code in enumerate(positional)}
    return out | {a.keyword.value: src.code(a.value) for a in call.args if a.keyword is not None}


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
    if structured is not None:  # called on a dict/list: one tensor from many (the stand-ins below)
        (expr, what), note = structured, None
    tf = src.alias("tensorflow")
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
        note = _IDENTITY_NOTE.format(what)
    if (unit := statement_unit(src, ctx, call, f"{what}(...)")) is None:
        return []
    return [_c(unit, feature, call, standin, note=note, cls=what, stock=stock)]


# -- stand-ins ----------------------------------------------------------
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
    if isinstance(value, cst.Name):  # its one assignment in the layer's scope, else in the module's
        scopes = (src.scope(call), src.module)
        assigned = [[n.value for n in src.assignments(s, value.value) if src.scope(n) is s] for s in scopes]
        value = next((v[0] for v in assigned if len(v) == 1), None)
    if isinstance(value, (cst.Dict, cst.DictComp)) or (isinstance(value, cst.Call) and is_name(value.func, "dict")):
        return "dict"
    if isinstance(value, (cst.List, cst.Tuple, cst.ListComp)):
        return "list"
    return None


AVERAGED = "averaged if of one shape, else concatenated (float32)"


def structured_standin(src: Src, call: cst.Call, prefix: str) -> tuple[str, str] | str | None:
    """(the stand-in, what it is in words) of a layer called on a dict or a
    list of inputs (`structured_input`), a layer class's and a `Lambda`'s
    alike; why it is not marked when the file imports no TensorFlow to write
    it with; None when the layer is called on one tensor."""
    if (shape := structured_input(src, call)) is None:
        return None
    if (tf := src.alias("tensorflow")) is None:
        return f"takes a {shape} of inputs and the file imports no TensorFlow to join them with: not marked"
    if shape == "list":
        return list_standin(prefix, tf), f"its list of inputs {AVERAGED}"
    # A layer that turns any structure of inputs into one float32 tensor.
    flat = (
        f'[{tf}.reshape({tf}.cast(t, "float32"), (-1, t.shape[1:].num_elements())) for t in {tf}.nest.flatten(inputs)]'
    )
    return f"{prefix}.Lambda(lambda inputs: {tf}.concat({flat}, axis=-1))", "its dict of inputs concatenated (float32)"


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
