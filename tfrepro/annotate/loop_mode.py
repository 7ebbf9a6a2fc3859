"""The compile mode of a hand-written loop's step, for the fit that stands in
for it (annotate/loops.py): toggling `custom_loop` must change the loop into
fit and nothing else, so fit keeps the loop's compile mode (as toggling a
strategy keeps the compile mode, Contract 3 "what actually ran").

- a step run eagerly (an inline loop, a step function no `tf.function`
  wraps) -> `run_eagerly=True`;
- a step function wrapped by `tf.function` (a decorator, or
  `step = tf.function(step)`) -> the graph, without XLA (`jit_compile=False`:
  Keras's "auto" would pick XLA on a GPU where the loop's function does not);
- the same with `jit_compile=True` -> `jit_compile=True`.

The wrapper is a feature of its own (`tf_function`, `jit_compile`): in a
variant with it OFF the step runs eagerly (or without XLA), so the mode is
read from the step function when fit is compiled, not fixed from the source.
"""

from __future__ import annotations

import libcst as cst

from tfrepro.annotate.source import Src, is_tf_function, jit_on, rebinds_itself


def _wrappers(src: Src, fn: cst.FunctionDef) -> list[cst.BaseExpression]:
    """The `tf.function` expressions that wrap `fn`: its decorators, and `fn = tf.function(fn, ...)`."""
    out = [d.decorator for d in fn.decorators if is_tf_function(d.decorator)]
    return out + [
        n.value for n in src.nodes(cst.Assign) if rebinds_itself(n) == fn.name.value and is_tf_function(n.value)
    ]


def compile_mode(src: Src, region: cst.CSTNode) -> str:
    """The keyword arguments of fit's `compile` that give it the mode of the
    loop's step (`region`: the step function, or the loop itself when the
    step is inline), as source text."""
    if not isinstance(region, cst.FunctionDef) or not (wrappers := _wrappers(src, region)):
        return "run_eagerly=True"
    name = region.name.value
    eager = f'run_eagerly=not hasattr({name}, "get_concrete_function")'
    if any(jit_on(w, legacy=True) for w in wrappers):
        return f'{eager}, jit_compile=getattr({name}, "_jit_compile", None) is True'
    return f"{eager}, jit_compile=False"
