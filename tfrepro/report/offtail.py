"""The tail of a `new --from` repro: what the script does after its last
training call with what a feature made.

Every feature is written OFF in the new project, and a statement after the
last training call may read what a feature made: `auc_cb.history[-1]` after
a `fit` that trained without the callback (the block that passes it is OFF,
the object is still built, its history stays empty: IndexError). The
zero-edit bisect's trials stop at the step cap and never run that line; a
plain `python repro.py` does, and fails. Such statements are commented out,
each under a note naming what it reads; the bisect needs none of them (the
symptom is in the training).

A name is a feature's when a block's ON part reads or binds it and no code
outside the blocks reads it up to the last training call (binding it there
is fine: `auc_cb = BatchValAUC(...)` stays; a module, function or class
the script binds outside the blocks is never one). A tail statement that binds a
name and is commented out makes that name one too (`h = cb.history`, then
`print(h[-1])`). The statements looked at are those of the module and of
each function it defines at its top level (a script that trains inside
`main()`): a body's own statements after its last training statement, each
commented out at its own indentation; a function's parameters are never a
feature's.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tfrepro import features as fb

# Calls that train: the last module-level statement holding one ends the training.
TRAINING_CALLS = frozenset({"fit", "fit_generator", "train_on_batch", "apply_gradients"})
NOTE = "# (tfrepro new --from) commented out so the baseline runs: it reads {names}, which only {features} used (OFF here)\n"


@dataclass(frozen=True)
class Commented:
    line: int  # its first line in the script (1-based)
    code: str  # its first line, stripped
    names: tuple[str, ...]
    features: tuple[str, ...]
    end: int = field(default=0, repr=False, compare=False)  # its last line
    indent: int = field(default=0, repr=False, compare=False)  # the column it is commented out at


def _names(node: ast.AST, ctx: type) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def comment_tail(text: str, path: str = "repro.py") -> tuple[str, list[Commented]]:
    """`text` (every feature ON, markers kept) with its tail statements that
    read a feature's names commented out, and what was commented."""
    try:
        tree = ast.parse(text)
        blocks = fb.parse(text, path).blocks
    except (SyntaxError, ValueError, fb.UserError):
        return text, []
    if not blocks:
        return text, []
    unmarked = [stmt for stmt in tree.body if _block_of(blocks, stmt.lineno) is None]
    bound: set[str] = set()  # a module, function or class bound outside the blocks is no feature's
    for stmt in unmarked:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
    bodies: list[tuple[list[ast.stmt], set[str]]] = [(tree.body, bound)]
    for stmt in unmarked:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args, *stmt.args.kwonlyargs)}
            params |= {a.arg for a in (stmt.args.vararg, stmt.args.kwarg) if a is not None}
            bodies.append((stmt.body, bound | params))
    lines = fb.split_lines(text)
    got = [c for body, outside in bodies for c in _tail(body, outside, blocks, lines)]
    if not got:
        return text, []
    out = list(lines)
    for c in sorted(got, key=lambda c: c.line, reverse=True):
        indent = " " * c.indent
        body = [fb.comment_line(x, indent) for x in lines[c.line - 1 : c.end]]
        note = indent + NOTE.format(names=", ".join(c.names), features=", ".join(c.features))
        out[c.line - 1 : c.end] = [note, *body]
    return "".join(out), sorted(got, key=lambda c: c.line)


def _block_of(blocks, line: int) -> fb.Block | None:
    return next((b for b in blocks if b.line < line < b.end_line), None)


def _tail(body: list[ast.stmt], outside: set[str], blocks, lines: list[str]) -> list[Commented]:
    """The statements of `body` after its last training statement that read
    a feature's names (`outside`: names that are never a feature's)."""
    called = [
        {n.func.attr for n in ast.walk(s) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        for s in body
    ]
    trained = [i for i, attrs in enumerate(called) if attrs & TRAINING_CALLS]
    if not trained:
        return []
    owners: dict[str, set[str]] = {}  # a feature's name -> the features that read or bind it
    outside = set(outside)
    for stmt in body[: trained[-1] + 1]:
        for n in ast.walk(stmt):
            if not isinstance(n, ast.Name):
                continue
            b = _block_of(blocks, n.lineno)
            if b is not None:
                owners.setdefault(n.id, set()).add(b.name)
            elif isinstance(n.ctx, ast.Load):
                outside.add(n.id)
    made = {name: feats for name, feats in owners.items() if name not in outside}
    got: list[Commented] = []
    tail = body[trained[-1] + 1 :]
    column = body[0].col_offset
    for k, stmt in enumerate(tail):
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        reads = sorted(_names(stmt, ast.Load) & set(made))
        if not reads or any(b.line <= last and first <= b.end_line for b in blocks):
            continue
        shared = (k > 0 and tail[k - 1].end_lineno == first) or (k + 1 < len(tail) and tail[k + 1].lineno == last)
        if shared or stmt.col_offset != column or not lines[first - 1].startswith(" " * column):
            continue  # `a; b` on one line (or a body indented with tabs): left alone
        feats = tuple(sorted(set().union(*(made[n] for n in reads))))
        for name in _names(stmt, ast.Store):
            made.setdefault(name, set(feats))
        got.append(Commented(first, lines[first - 1].strip(), tuple(reads), feats, last, column))
    return got
