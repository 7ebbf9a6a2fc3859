"""The OFF text of a marked block: its lines with each candidate's node
replaced (annotate/detect.py's edits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfrepro.annotate.source import Src

if TYPE_CHECKING:
    from tfrepro.annotate.candidate import Candidate


def off_text(src: Src, same: list[Candidate], start: int, end: int) -> str | None:
    """Lines `start`..`end` with each candidate's node replaced (its OFF
    part), or None when no candidate replaces a node (the OFF part is empty)."""
    if not any(c.node is not None for c in same):
        return None
    pieces, cursor = [], src.offset(start, 0)
    for c in same:
        if c.node is None:
            continue
        a, b = src.span(c.node)
        if a < cursor:
            continue  # nested in a replaced node
        pieces.append(src.between(cursor, a))
        pieces.append(c.replacement or "")
        cursor = b
    pieces.append(src.between(cursor, src.offset(end, 0) + len(src.lines[end - 1])))
    off = "".join(pieces)
    return off if off.endswith("\n") else off + "\n"
