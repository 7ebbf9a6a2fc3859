"""Rebuild a list literal one element per statement (`xs = []`,
`xs.append(a)`, ...) so that each element can sit in its own block. The list
is the same, built in the same order; comments between the elements move to
full lines just above the element they annotate."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from tfrepro.annotate.model import BlockSeg
from tfrepro.annotate.source import Src


def append_stmt(src: Src, indent: str, var: str, value: cst.BaseExpression, code: str | None = None) -> str:
    """`var.append(<value>)` at `indent`; a multi-line element keeps its layout."""
    text = src.code(value) if code is None else code
    col = src.pos[value].start.column
    if "\n" in text and col > len(indent):
        return f"{indent}{var}.append(\n{' ' * col}{text}\n{indent})\n"
    return f"{indent}{var}.append({text})\n"


def split_list(
    src: Src, lst: cst.List, indent: str, segment: Callable[[cst.Element], str | BlockSeg]
) -> list[str | BlockSeg]:
    """Segments for the elements (`segment(el)` makes each), with the list's
    own comments placed above the element they belong to."""
    elements = list(lst.elements)
    spans = [src.span(e.value) for e in elements]
    placed: dict[int, list[str]] = {}
    for n, line, trailing in src.comments(lst, spans):  # one inside an element travels with its code
        if trailing:
            idx = max((i for i, e in enumerate(elements) if src.end_line(e.value) <= line), default=0)
        else:
            idx = min((i for i, e in enumerate(elements) if src.line(e.value) > line), default=len(elements) - 1)
        placed.setdefault(idx, []).append(n.value)
    out: list[str | BlockSeg] = []
    for i, el in enumerate(elements):
        out.extend(f"{indent}{c}\n" for c in placed.get(i, []))
        out.append(segment(el))
    return out
