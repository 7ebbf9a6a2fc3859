"""Recognisers that rebuild a statement: callbacks passed to `fit` (one
feature per callback class per script), then tf.data chains (below).

Every instance of one class (in every `fit` of the script) belongs to the
same feature, so they switch together; a callback whose class is not known
(a bare variable) is its own feature. A class of the file that sets
`model.stop_training` is a stopping callback (`affects_loss`).

The list is rebuilt one element per statement so that each element can be
switched alone: `cbs = [a, b]` becomes `cbs = []`, `cbs.append(a)`,
`cbs.append(b)` (the same list, built in the same order). The list may be
inline in the `fit` call, a variable of the same function, or what a helper
function of the file returns; `cbs.append(x)` statements are wrapped as they
are. Anything else (comprehensions, `+`, `extend`, parameters) is reported.

A stock checkpoint callback built with a batch schedule (`save_freq=N`) is
switched by its schedule, not removed: its OFF form is the same callback at
`save_freq="epoch"` (the default). The script's later code often reads the
checkpoints back (`load_weights`, listing the directory), so a removed
callback would break it; at the default schedule the files still exist, and
the per-batch saving is gone. Every `save_freq=N` call of the class gets
such a block (where the callback is built), the class's other instances
stay as written; a class with no batch schedule is removed as above.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from tfrepro import catalog
from tfrepro.annotate.model import BlockSeg, Context, Edit, Found, append_stmt, split_list
from tfrepro.annotate.source import Src, arg, assigned_name, is_name, last_name, literal
from tfrepro.catalog import snake

# Stock callbacks that save on a schedule: `save_freq` ("epoch", the default,
# or every N batches) and its positional index.
_SAVE_FREQ = {"ModelCheckpoint": 6, "BackupAndRestore": 1}
_FIT = m.Attribute(attr=m.Name("fit") | m.Name("fit_generator"))  # `model.fit(...)`, `model.fit_generator(...)`


class _Collector:
    def __init__(self, src: Src, ctx: Context) -> None:
        self.src = src
        self.ctx = ctx
        self.edits: list[Edit] = []
        self.done: set[int] = set()
        self.by_class: dict[str, str] = {}  # callback class -> its one feature
        # The classes of the file that assign `<something>.stop_training`.
        stop = m.Assign(
            targets=[m.ZeroOrMore(), m.AssignTarget(m.Attribute(attr=m.Name("stop_training"))), m.ZeroOrMore()]
        )
        self.stopping = {c.name.value for c in src.nodes(cst.ClassDef) if any(m.matches(a, stop) for a in src.walk(c))}
        # call -> its save_freq argument, for each batch-scheduled checkpoint not yet in a block
        self.scheduled = {c: a for c in src.nodes(cst.Call) if (a := _batch_schedule(c))}
        self.scheduled_classes = {last_name(c.func) for c in self.scheduled}

    # -- resolution --------------------------------------------------------
    def resolve(self, v: cst.BaseExpression, scope: cst.CSTNode, line: int, depth: int) -> None:
        src, ctx = self.src, self.ctx
        if depth > 3:
            return
        if isinstance(v, cst.Name):
            p = scope.params if isinstance(scope, cst.FunctionDef) else None
            if p is not None and v.value in {x.name.value for x in [*p.params, *p.kwonly_params, *p.posonly_params]}:
                why = "not followed (annotate where the list is built)"
                ctx.skip(src.path, line, f"callbacks come from the parameter {v.value!r}: {why}")
                return
            assigns = [s for s in _statements(src, scope) if assigned_name(s.body[0]) == v.value]
            if len(assigns) != 1:
                if not assigns and scope is not src.module:
                    return self.resolve(v, src.module, line, depth + 1)
                ctx.skip(src.path, line, f"callbacks list {v.value!r} is assigned {len(assigns)} times: not followed")
                return
            stmt = assigns[0]
            value = stmt.body[0].value  # type: ignore[attr-defined]
            if isinstance(value, cst.List):
                self.list_statement(stmt, value, v.value, scope)
            elif isinstance(value, cst.Call):
                self.resolve(value, scope, src.line(stmt), depth + 1)
            else:
                why = "is built by an expression that cannot be split: not marked"
                ctx.skip(src.path, src.line(stmt), f"callbacks list {v.value!r} {why}")
            self.added_later(v.value, scope)
        elif isinstance(v, cst.Call) and isinstance(v.func, cst.Name):
            fn = next((n for n in src.nodes(cst.FunctionDef) if n.name.value == v.func.value), None)
            if fn is None:
                ctx.skip(
                    src.path, line, f"callbacks come from {v.func.value}(), not defined in this file: not followed"
                )
                return
            returns = [n for n in src.walk(fn) if isinstance(n, cst.Return) and src.scope(n) is fn]
            if len(returns) != 1 or returns[0].value is None:
                ctx.skip(
                    src.path, src.line(fn), f"{v.func.value}() returns its callbacks in several places: not followed"
                )
                return
            ret = returns[0].value
            stmt = src.statement(returns[0])
            if isinstance(ret, cst.List) and isinstance(stmt, cst.SimpleStatementLine):
                self.list_statement(stmt, ret, None, fn)
            else:
                self.resolve(ret, fn, src.line(returns[0]), depth + 1)
        else:
            ctx.skip(src.path, line, "callbacks given by an expression that cannot be split: not marked")

    def added_later(self, name: str, scope: cst.CSTNode) -> None:
        """The statements of `scope` that add to the list `name`: an
        `append` is marked like a list item, a bulk addition is skipped."""
        src, ctx = self.src, self.ctx
        on_list = m.Expr(m.Call(func=m.Attribute(value=m.Name(name), attr=m.SaveMatchedNode(m.Name(), "method"))))
        for s in _statements(src, scope):
            small = s.body[0]
            method = got["method"].value if (got := m.extract(small, on_list)) else None
            if method in ("extend", "insert") or m.matches(small, m.AugAssign(target=m.Name(name))):
                ctx.skip(src.path, src.line(s), f"callbacks added to {name!r} in bulk: not marked")
            elif method == "append" and small.value.args and id(s) not in self.done:  # type: ignore[attr-defined]
                self.done.add(id(s))
                self.statement_block(s, small.value.args[0].value, scope)  # type: ignore[attr-defined]

    # -- edits -------------------------------------------------------------
    def list_statement(
        self, stmt: cst.SimpleStatementLine, lst: cst.List, var: str | None, scope: cst.CSTNode, fit: bool = False
    ) -> None:
        """`var = [a, b]`, `return [a, b]` or `fit(..., callbacks=[a, b])` rebuilt with appends."""
        src = self.src
        if id(lst) in self.done or not lst.elements:
            return
        self.done.add(id(lst))
        if (indent := src.indent_of(stmt)) is None:
            what = "fit call" if fit else "callbacks list"
            self.ctx.skip(src.path, src.line(stmt), f"{what} cannot be commented at its indentation: not marked")
            return
        if starred := next((el for el in lst.elements if isinstance(el, cst.StarredElement)), None):
            self.ctx.skip(src.path, src.line(starred), "a starred element in a callbacks list: not marked")
            return
        small, start, end = stmt.body[0], src.line(stmt), src.end_line(stmt)
        name = var or src.fresh_name(("callbacks", "fit_callbacks" if fit else "cbs"))

        def segment(el: cst.Element) -> str | BlockSeg:
            return self.block_for(el.value, append_stmt(src, indent, name, el.value), src.line(el.value), scope)

        segs = split_list(src, lst, indent, segment)
        head = f"{indent}{name} = []\n"
        if isinstance(small, cst.AnnAssign) and not fit:
            head = f"{indent}{name}: {src.code(small.annotation.annotation)} = []\n"
        if fit:  # the fit call itself, given the rebuilt list
            tail: tuple[str, ...] = (src.lines_text(start, end, [(lst, name)]),)
        else:
            tail = (f"{indent}return {name}\n",) if isinstance(small, cst.Return) else ()
        if (edit := Edit(start, end, indent, (head, *segs, *tail))).found:
            self.edits.append(edit)

    def statement_block(self, stmt: cst.SimpleStatementLine, value: cst.BaseExpression, scope: cst.CSTNode) -> bool:
        """`stmt` as a block when `value` is a callback it names; False: not at
        an indentation a comment can mark."""
        src = self.src
        if (indent := src.indent_of(stmt)) is None:
            return False
        start, end = src.line(stmt), src.end_line(stmt)
        if isinstance(seg := self.block_for(value, src.lines_text(start, end), start, scope), BlockSeg):
            self.edits.append(Edit(start, end, indent, (seg,)))
        return True

    def block_for(self, value: cst.BaseExpression, stmt: str, line: int, scope: cst.CSTNode) -> str | BlockSeg:
        src = self.src
        cls, var = (last_name(value.func), None) if isinstance(value, cst.Call) else (None, None)
        if isinstance(value, cst.Name):  # the class of the first call assigned to it, in its scope, then the module
            stmts = [*_statements(src, scope), *_statements(src, src.module)]
            values = [s.body[0].value for s in stmts if assigned_name(s.body[0]) == value.value]  # type: ignore[attr-defined]
            cls, var = next((last_name(v.func) for v in values if isinstance(v, cst.Call)), None), value.value
        off = freq = None
        if cls in self.scheduled_classes:
            if value not in self.scheduled:
                return stmt  # stays ON: its class is switched by the schedule where it is built
            freq = self.scheduled.pop(value).value
            at_epoch = src.splice(*src.span(value), [(freq, '"epoch"')])  # the call at save_freq="epoch"
            off = stmt.replace(src.code(value), at_epoch, 1)
        if (name := self.by_class.get(cls) if cls else None) is None:  # the class's feature, else a new one
            name = self.ctx.claim(callback_feature(cls, var), "callback", group=False, path=src.path, line=line)
            if name is not None and cls:
                self.by_class[cls] = name
        if name is None or self.ctx.in_block(src.path, line):
            return stmt
        entry = catalog.callback_entry(cls, name, stops=cls in self.stopping)
        desc = entry.describe(cls=cls or var or "a")
        if freq is not None:
            every = src.code(freq)
            desc = f'{cls} saving every {every} batches; off: save_freq="epoch" (its default: saved once per epoch)'
        return BlockSeg(Found(name, desc, src.path, line, entry.kind, affects_loss=entry.affects_loss), stmt, off)


def _batch_schedule(call: cst.Call) -> cst.Arg | None:
    """The `save_freq` argument of a stock checkpoint callback saving every N
    batches (anything but "epoch"), or None."""
    pos = _SAVE_FREQ.get(last_name(call.func) or "")
    a = arg(call, pos, "save_freq") if pos is not None else None
    return a if a is not None and literal(a.value) != "epoch" else None


def _statements(src: Src, scope: cst.CSTNode) -> list[cst.SimpleStatementLine]:
    """Simple statement lines of `scope` itself (not of nested functions)."""
    return [n for n in src.nodes(cst.SimpleStatementLine) if len(n.body) == 1 and src.scope(n) is scope]


def callback_feature(class_name: str | None, var_name: str | None) -> str:
    """`callback_early_stopping` from `EarlyStopping`, or from a variable name."""
    special = {
        "TensorBoard": "tensorboard",
        "TerminateOnNaN": "terminate_on_nan",
        "LearningRateScheduler": "lr_scheduler",
        "LambdaCallback": "lambda",
    }
    name = class_name or var_name
    short = special.get(class_name or "") or (snake(name) if name else "custom")
    for suffix in ("_callback", "_cb"):  # never all of `short`: snake() leaves no "_" at either end
        short = short.removesuffix(suffix)
    for pre in ("callback_", "cb_"):
        short = short.removeprefix(pre)
    return "callback_" + short


def callback_edits(src: Src, ctx: Context) -> list[Edit]:
    c = _Collector(src, ctx)
    for fit in src.nodes(cst.Call):
        if not m.matches(fit.func, _FIT) or (value := arg(fit, None, "callbacks")) is None:
            continue
        v, scope, stmt = value.value, src.scope(fit), src.statement(fit)
        if not isinstance(v, cst.List):
            c.resolve(v, scope, src.line(fit), depth=0)
        elif isinstance(stmt, str | cst.Decorator):
            ctx.skip(src.path, src.line(fit), f"fit with inline callbacks {stmt}: not marked")
        else:
            c.list_statement(stmt, v, None, scope, fit=True)
    # A block for each batch-scheduled checkpoint built outside a callbacks list
    # (`cp = ModelCheckpoint(..., save_freq=5)`): OFF at "epoch".
    for call in list(c.scheduled):
        stmt = src.statement(call)
        if not (isinstance(stmt, cst.SimpleStatementLine) and c.statement_block(stmt, call, src.scope(call))):
            ctx.skip(src.path, src.line(call), f"{last_name(call.func)} with save_freq in this statement: not marked")
    return c.edits


# -- tf.data chains: `ds = ds.map(f, num_parallel_calls=A).batch(32).prefetch(A)`
# is split into one statement per link that is a feature, so each can be its
# own block; the split statements compute the same dataset (each link is
# applied once, in the same order, to the result of the previous one).
#
# Feature links and their OFF form:
#     prefetch / cache / shuffle   the link dropped
#     interleave(f, ...)           flat_map(f): files read one after another
#     map(f, num_parallel_calls)   map(f)                       (parallel_map)
#     batch(..., num_parallel_calls) batch(...)                 (parallel_batch)

_STRONG = {"prefetch", "interleave", "padded_batch", "unbatch", "with_options", "rebatch", "ragged_batch", "flat_map"}
_NAME_HINT = re.compile(r"(^|_)(ds|dataset|datasets|data|pipeline)(_|$)|dataset")
_PARALLEL = {"map": "parallel_map", "batch": "parallel_batch", "padded_batch": "parallel_batch"}
_DROPPED = ("prefetch", "cache", "shuffle")  # links that are their feature, dropped when OFF
# `x = <call>`, `x: T = <call>` or `return <call>`, alone on its line: a chain that can be split.
_CHAIN_STATEMENT = m.SimpleStatementLine([m.Assign(value=m.Call()) | m.AnnAssign(value=m.Call()) | m.Return(m.Call())])
# The tf.data methods a chain is made of (each name once: the feature links and `_STRONG` above).
METHODS = {
    *_STRONG,
    *_PARALLEL,
    *_DROPPED,
    "repeat",
    "filter",
    "take",
    "skip",
    "apply",
    "enumerate",
    "shard",
    "window",
    "concatenate",
    "take_while",
    "scan",
    "group_by_window",
    "bucket_by_sequence_length",
    "ignore_errors",
    "snapshot",
    "unique",
    "parallel_interleave",
    "prefetch_to_device",
}


def flatten(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.Call]]:
    """(base, links in application order) of a method chain."""
    links: list[cst.Call] = []
    node = expr
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in METHODS:
        links.append(node)
        node = node.func.value
    links.reverse()
    return node, links


def _feature_kind(call: cst.Call) -> str | None:
    method = call.func.attr.value  # type: ignore[attr-defined]
    if method in (*_DROPPED, "interleave"):
        return method
    # map(f, num_parallel_calls) takes it second; batch, padded_batch by keyword only
    npc = arg(call, 1 if method == "map" else None, "num_parallel_calls")
    return _PARALLEL.get(method) if npc is not None and literal(npc.value) not in (None, 1) else None


def _is_dataset(src: Src, expr: cst.BaseExpression, known: set[str]) -> bool:
    base, links = flatten(expr)
    base_code = src.code(base)
    named = isinstance(base, cst.Name) and bool(links) and (base.value in known or bool(_NAME_HINT.search(base.value)))
    strong = any(link.func.attr.value in _STRONG for link in links)  # type: ignore[attr-defined]
    return strong or "Dataset" in base_code or "tf.data" in base_code or named


def chain_edits(src: Src, ctx: Context) -> list[Edit]:
    known: set[str] = set()  # the names assigned a tf.data pipeline somewhere in the file
    for _ in range(3):
        for n in (*src.nodes(cst.Assign), *src.nodes(cst.AnnAssign)):
            if (name := assigned_name(n)) is not None and _is_dataset(src, n.value, known):
                known.add(name)
    edits: list[Edit] = []
    handled: set[int] = set()
    for stmt in src.nodes(cst.SimpleStatementLine):
        if not m.matches(stmt, _CHAIN_STATEMENT):
            continue
        links = flatten(value := stmt.body[0].value)[1]  # type: ignore[attr-defined]
        if not links or not any(_feature_kind(c) for c in links) or not _is_dataset(src, value, known):
            continue
        handled.update(id(c) for c in links)
        if (edit := _split(src, ctx, stmt)) is not None:
            edits.append(edit)
    # Feature links anywhere else (an argument, a lambda...) cannot be split safely.
    for n in src.nodes(cst.Call):
        # links: n's chain, n last (none when n is no chain link)
        if id(n) in handled or not (links := flatten(n)[1]) or not _feature_kind(n) or not _is_dataset(src, n, known):
            continue
        handled.update(id(c) for c in links)
        kinds = sorted({k for c in links if (k := _feature_kind(c))})  # n's own among them
        if any(ctx.wanted(k, "dataset") for k in kinds):
            why = "inside an expression: not split (assign the pipeline to a variable first)"
            ctx.skip(src.path, src.line(n), f"tf.data {', '.join(kinds)} {why}")
    return edits


def _target(
    src: Src, ctx: Context, stmt: cst.SimpleStatementLine, base: cst.BaseExpression, calls: list[cst.Call]
) -> tuple[str, str] | None:
    """(the name each link is assigned to, its annotation or ""), or None
    (said in a skip) when the chain cannot be split over a name."""
    line, small = src.line(stmt), stmt.body[0]
    if isinstance(small, cst.Return):
        return src.fresh_name(("dataset", "ds", "pipeline")), ""
    if (target := assigned_name(small)) is None:
        ctx.skip(src.path, line, "tf.data chain assigned to something other than a plain name: not split")
        return None
    annotation = f": {src.code(small.annotation.annotation)}" if isinstance(small, cst.AnnAssign) else ""
    # Rebinding the name between links would change what later links see.
    if any(is_name(n, target) for c in calls for a in c.args for n in src.walk(a)):
        ctx.skip(src.path, line, f"tf.data chain uses {target!r} inside its own links: not split")
        return None
    if not is_name(base, target) and any(is_name(n, target) for n in src.walk(base)):
        ctx.skip(src.path, line, f"tf.data chain uses {target!r} in its source: not split")
        return None
    return target, annotation


def _claim_links(src: Src, ctx: Context, calls: list[cst.Call]) -> dict[int, Found]:
    """The links that are features, each claiming its name: id(link) -> Found."""
    found: dict[int, Found] = {}
    for call in calls:
        if (kind := _feature_kind(call)) is None:
            continue
        line = src.line(call.func.attr)  # type: ignore[attr-defined]
        if (name := ctx.claim(kind, "dataset", group=True, path=src.path, line=line)) is None:
            continue
        if kind == "interleave" and arg(call, 0, "map_func") is None:
            ctx.skip(src.path, src.line(call), "interleave without a map function: not marked")
            continue
        found[id(call)] = Found.of(name, catalog.CATALOG[kind].description, src.path, line)
    return found


def _split(src: Src, ctx: Context, stmt: cst.SimpleStatementLine) -> Edit | None:
    line, small = src.line(stmt), stmt.body[0]
    base, calls = flatten(small.value)  # type: ignore[attr-defined]
    if (indent := src.indent_of(stmt)) is None:
        ctx.skip(src.path, line, "tf.data chain: its lines cannot be commented at its indentation: not split")
        return None
    if (named := _target(src, ctx, stmt, base, calls)) is None:
        return None
    target, annotation = named
    found = _claim_links(src, ctx, calls)
    if not found:
        return None
    # The base with any leading plain links, then each feature link alone,
    # plain links in between kept together.
    groups: list[list[cst.Call]] = []
    for call in calls:
        if id(call) in found or not groups or id(groups[-1][-1]) in found:
            groups.append([call])
        else:
            groups[-1].append(call)
    base_code = src.code(base)
    whole = isinstance(small, (cst.Assign, cst.AnnAssign)) and len(groups) == 1
    # The comments the split statements would drop (between links, and the
    # trailing one), by the index of the link they belong to (len(calls):
    # after the last statement); those above the statement stay where they
    # are (outside the edit). Nothing to split: the statement is kept byte
    # for byte, comments included.
    kept = [(0, src.span(stmt)[0]), src.span(base), *((src.span(c.func.attr)[1], src.span(c)[1]) for c in calls)]  # type: ignore[attr-defined]
    starts = [src.line(c.func.attr) for c in calls]  # type: ignore[attr-defined]
    comments = {} if whole else src.comments(stmt, kept, starts, starts, len(calls))

    segments: list[str | BlockSeg] = []
    for gi, group in enumerate(groups):
        receiver = base_code if gi == 0 else target
        lhs = f"{indent}{target}{annotation if gi == 0 else ''} = "
        for call in group:
            segments.extend(f"{indent}{c}\n" for c in comments.get(calls.index(call), []))
        on = lhs + receiver + "".join(_tail(src, call) for call in group) + "\n"
        if (feature := found.get(id(group[0]))) is None:
            segments.append(on)
            continue
        if whole:
            on = src.lines_text(line, src.end_line(stmt))  # nothing to split: keep the bytes
        off = _off(src, group[0], lhs, receiver, target)
        segments.append(BlockSeg(feature, on, off))
    segments.extend(f"{indent}{c}\n" for c in comments.get(len(calls), []))
    if isinstance(small, cst.Return):
        segments.append(f"{indent}return {target}\n")
    return Edit(line, src.end_line(stmt), indent, tuple(segments))


def _tail(src: Src, call: cst.Call) -> str:
    """`.method(args...)` as written (whitespace before the dot normalised)."""
    attr = call.func.attr  # type: ignore[attr-defined]
    return "." + attr.value + src.text[src.span(attr)[1] : src.span(call)[1]]


def _off(src: Src, call: cst.Call, lhs: str, receiver: str, target: str) -> str | None:
    kind = _feature_kind(call)
    if kind in _DROPPED:
        return None if receiver == target else lhs + receiver + "\n"
    if kind == "interleave":
        fn = arg(call, 0, "map_func")
        return f"{lhs}{receiver}.flat_map({src.code(fn.value)})\n"  # type: ignore[union-attr]
    positional = [x for x in call.args if x.keyword is None and not x.star]
    parts = []
    for a in call.args:
        if a.keyword is not None and a.keyword.value in ("num_parallel_calls", "deterministic"):
            continue
        if kind == "parallel_map" and a in positional and positional.index(a) >= 1:
            continue  # map(f, num_parallel_calls, deterministic) positionally
        kw = f"{a.keyword.value}=" if a.keyword is not None else (a.star or "")
        parts.append(kw + src.code(a.value))
    return f"{lhs}{receiver}.{call.func.attr.value}({', '.join(parts)})\n"  # type: ignore[attr-defined]
