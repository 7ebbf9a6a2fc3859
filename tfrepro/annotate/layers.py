"""The project's own Keras `Layer` subclasses and a stock layer to stand in
for each when its feature is OFF.

"Obvious" stock equivalents, in order: the stock layer the class subclasses
(when it keeps the stock constructor), then a layer its name says it is
(`...LayerNorm` -> `LayerNormalization`); otherwise `Identity()` with a note
asking the user to choose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from tfrepro.annotate.source import Src, dotted, last_name
from tfrepro.catalog import snake

_NOT_LAYERS = {"Model", "Sequential", "Functional", "Layer", "InputSpec", "Callback"}
_ALWAYS_KW = ("name", "dtype")

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
    name: str
    stock_base: str | None  # e.g. "Dense" for `class MyDense(layers.Dense)`
    init_params: tuple[str, ...] | None  # None: no __init__ of its own
    adds_loss: bool = False  # part of the objective (`self.add_loss`): no stand-in

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


@dataclass(frozen=True)
class ClassDef:
    """One class statement of a file, as much of it as `resolve_layer_classes` needs."""

    name: str
    bases: tuple[tuple[bool, str | None, str | None], ...]  # (a Keras layer base, its stock layer, last name)
    init_params: tuple[str, ...] | None
    adds_loss: bool


def class_defs(src: Src) -> tuple[ClassDef, ...]:
    """Every class statement of `src`, in document order (one walk of the file)."""
    out = []
    for node in src.nodes(cst.ClassDef):
        bases = tuple((*_keras_layer_base(src, b.value), last_name(b.value)) for b in node.bases)
        init = next((s for s in node.body.body if m.matches(s, m.FunctionDef(m.Name("__init__")))), None)
        params = None if init is None else (*init.params.params, *init.params.kwonly_params)
        names = None if params is None else tuple(p.name.value for p in params if p.name.value != "self")
        out.append(ClassDef(node.name.value, bases, names, "add_loss(" in src.code(node)))
    return tuple(out)


def collect_layer_classes(defs: Iterable[ClassDef]) -> dict[str, LayerClass]:
    """Every `Layer` subclass among `defs`, direct or through another; a name
    defined twice takes the first definition that is a layer."""
    classes = list(defs)
    found: dict[str, LayerClass] = {}
    changed = True
    while changed:
        changed = False
        for c in classes:
            if c.name in found:
                continue
            stock: str | None = None
            is_layer = False
            for ok, st, parent in c.bases:
                if ok:
                    is_layer, stock = True, st
                elif parent in found:
                    is_layer, stock = True, None
                if parent in _NOT_LAYERS - {"Layer"} and not ok:
                    is_layer = False
                    break
            if is_layer:
                found[c.name] = LayerClass(c.name, stock, c.init_params, c.adds_loss)
                changed = True
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
        kept: dict[str, str] = {}
        for i, pname in enumerate(positional):
            if i in given:
                kept[pname] = given.pop(i)
        for k in (*positional, *keywords, *_ALWAYS_KW):
            if k in given:
                kept[k] = given[k]
        if any(r not in kept for r in positional):
            break
        args = ", ".join(f"{k}={v}" for k, v in kept.items())
        return f"{prefix}.{stock}({args})", f"stock {stock}", None
    name_kw = f"name={given['name']}" if given and "name" in given else ""
    return f"{prefix}.Identity({name_kw})", "Identity (no obvious stock equivalent)", identity_note(cls.name)


def identity_note(what: str) -> str:
    return (
        f"no obvious stock layer for {what}: OFF uses Identity(); "
        "edit the else part to choose the stock layer it should be compared with"
    )


def _named_args(src: Src, call: cst.Call, cls: LayerClass) -> dict | None:
    """Arguments of the call: keyword -> code, and positional index -> code
    for positionals the class's own __init__ cannot name. None: *args/**kw."""
    out: dict = {}
    pos = 0
    for a in call.args:
        if a.star:
            return None
        code = src.code(a.value)
        if a.keyword is not None:
            out[a.keyword.value] = code
            continue
        if cls.init_params is not None and pos < len(cls.init_params):
            out[cls.init_params[pos]] = code
        else:
            out[pos] = code
        pos += 1
    return out
