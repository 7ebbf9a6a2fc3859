"""tf.data chains: `ds = ds.map(f, num_parallel_calls=A).batch(32).prefetch(A)`
is split into one statement per link that is a feature, so each can be its
own block; the split statements compute the same dataset (each link is
applied once, in the same order, to the result of the previous one).

Feature links and their OFF form:
    prefetch / cache / shuffle   the link dropped
    interleave(f, ...)           flat_map(f): files read one after another
    map(f, num_parallel_calls)   map(f)                       (parallel_map)
    batch(..., num_parallel_calls) batch(...)                 (parallel_batch)
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from tfrepro import catalog
from tfrepro.annotate.model import BlockSeg, Context, Edit, Found
from tfrepro.annotate.source import Src, arg, assigned_name, is_name, literal

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
    for c in comments.get(len(calls), []):
        segments.append(f"{indent}{c}\n")
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
