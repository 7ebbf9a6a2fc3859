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
`print(h[-1])`). Only module-level statements are looked at: a script that
trains inside `main()` is left as it is.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

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


def _names(node: ast.AST, ctx: type) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _trains(stmt: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in TRAINING_CALLS
        for n in ast.walk(stmt)
    )


def comment_tail(text: str, path: str = "repro.py") -> tuple[str, list[Commented]]:
    """`text` (every feature ON, markers kept) with its tail statements that
    read a feature's names commented out, and what was commented."""
    try:
        tree = ast.parse(text)
        blocks = fb.parse(text, path).blocks
    except (SyntaxError, ValueError, fb.UserError):
        return text, []
    trained = [i for i, s in enumerate(tree.body) if _trains(s)]
    if not blocks or not trained:
        return text, []

    def block_of(line: int) -> fb.Block | None:
        return next((b for b in blocks if b.line < line < b.end_line), None)

    owners: dict[str, set[str]] = {}  # a feature's name -> the features that read or bind it
    outside: set[str] = set()
    for stmt in tree.body[: trained[-1] + 1]:
        for n in ast.walk(stmt):
            if not isinstance(n, ast.Name):
                continue
            b = block_of(n.lineno)
            if b is not None:
                owners.setdefault(n.id, set()).add(b.name)
            elif isinstance(n.ctx, ast.Load):
                outside.add(n.id)
    for stmt in tree.body:  # a module, function or class bound outside the blocks is no feature's
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and block_of(stmt.lineno) is None:
            outside.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and block_of(stmt.lineno) is None:
            outside.add(stmt.name)
    made = {name: feats for name, feats in owners.items() if name not in outside}
    lines = fb.split_lines(text)
    got: list[Commented] = []
    tail = tree.body[trained[-1] + 1 :]
    for k, stmt in enumerate(tail):
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        reads = sorted(_names(stmt, ast.Load) & set(made))
        if not reads or any(b.line <= last and first <= b.end_line for b in blocks):
            continue
        shared = (k > 0 and tail[k - 1].end_lineno == first) or (k + 1 < len(tail) and tail[k + 1].lineno == last)
        if shared or stmt.col_offset != 0:
            continue  # `a; b` on one line: left alone
        feats = tuple(sorted(set().union(*(made[n] for n in reads))))
        for name in _names(stmt, ast.Store):
            made.setdefault(name, set(feats))
        got.append(Commented(first, lines[first - 1].strip(), tuple(reads), feats))
    if not got:
        return text, []
    out = list(lines)
    for c in reversed(got):
        stmt = next(s for s in tail if s.lineno == c.line)
        end = stmt.end_lineno or stmt.lineno
        body = [fb.comment_line(x, "") for x in lines[c.line - 1 : end]]
        note = NOTE.format(names=", ".join(c.names), features=", ".join(c.features))
        out[c.line - 1 : end] = [note, *body]
    return "".join(out), got
