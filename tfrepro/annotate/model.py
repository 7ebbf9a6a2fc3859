"""Values of the annotator: what was found, what was left alone, and the
line edits that write feature blocks (Contract 1 of DESIGN.md).

An `Edit` replaces whole lines `start..end` (1-based, inclusive) of the
original text with plain code and feature blocks. Every block is written ON:
its first part is the original code (or code computing exactly the same
thing), its `else` part the OFF alternative, commented.

A marking `Candidate` is one statement, the feature it holds and its OFF
replacement (annotate/detect.py finds them, annotate/custom.py for layers).

A list literal is rebuilt one element per statement (`xs = []`,
`xs.append(a)`, ...: `split_list`) so that each element can sit in its own
block. The list is the same, built in the same order; comments between the
elements move to full lines just above the element they annotate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tfrepro import catalog
from tfrepro.annotate.source import first_free

if TYPE_CHECKING:
    import libcst as cst

    from tfrepro.annotate.source import Src


class _Located:
    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Found(_Located):
    """One block proposed for a feature (a feature may have several blocks)."""

    name: str
    description: str
    path: str
    line: int  # line of the code in the original file
    kind: str  # e.g. "dataset", "callback", "custom_layer"
    note: str | None = None
    affects_loss: bool = False

    @classmethod
    def of(cls, name: str, description: str, path: str, line: int, note: str | None = None) -> Found:
        """A block of the feature `name`, whose kind and `affects_loss` are the catalog's."""
        return cls(name, description, path, line, catalog.kind_of(name) or "", note, catalog.affects_loss(name))


@dataclass(frozen=True)
class Skipped(_Located):
    """Something that looks like a feature but cannot be marked safely."""

    path: str
    line: int
    reason: str


@dataclass(frozen=True)
class BlockSeg:
    """A feature block inside an edit, for the feature `found`; `on`/`off` are
    full lines (with the block's indentation and newlines). `off is None`: no
    else part."""

    found: Found
    on: str
    off: str | None = None


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    indent: str
    segments: tuple[str | BlockSeg, ...]

    @property
    def found(self) -> tuple[Found, ...]:
        return tuple(s.found for s in self.segments if isinstance(s, BlockSeg))

    @property
    def names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.found)


@dataclass
class Context:
    """Naming and filtering shared by every recogniser of one run.

    Grouped kinds (`prefetch`, `mixed_precision`, `custom_layer_x`...) give
    every occurrence the same name, so their blocks switch together; a
    grouped name that an existing block already uses is skipped (running
    the annotator twice changes nothing). Per-occurrence kinds (callbacks)
    get `_2`, `_3`... suffixes instead.
    """

    existing: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    claimed: set[str] = field(default_factory=set)
    skipped: list[Skipped] = field(default_factory=list)
    # path -> (first, last) line of each block already in the file
    occupied: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def in_block(self, path: str, line: int) -> bool:
        return any(a <= line <= b for a, b in self.occupied.get(path, ()))

    def wanted(self, name: str, kind: str) -> bool:
        return self.only is None or any(name == o or kind == o or name.startswith(o + "_") for o in self.only)

    def claim(self, base: str, kind: str, *, group: bool, path: str, line: int) -> str | None:
        """The name to use, or None when the feature must be left alone."""
        if self.in_block(path, line) or not self.wanted(base, kind):
            return None
        if group and base in self.existing:
            self.skip(path, line, f"feature name {base!r} is already used by a block; left as is")
            return None
        name = base if group else first_free(self.existing | self.claimed, (base,))
        self.claimed.add(name)
        return name

    def skip(self, path: str, line: int, reason: str) -> None:
        item = Skipped(path, line, reason)
        if item not in self.skipped:
            self.skipped.append(item)


@dataclass
class Candidate:
    unit: cst.CSTNode  # a SimpleStatementLine or a Decorator
    base: str  # feature name before suffixing
    kind: str  # every candidate's feature is grouped: one name for all its occurrences
    description: str
    node: cst.CSTNode | None = None  # replaced in the else part (None: no else part)
    replacement: str | None = None
    note: str | None = None


def candidate(
    unit: cst.CSTNode,
    name: str,
    node: cst.CSTNode | None = None,
    replacement: str | None = None,
    *,
    note: str | None = None,
    desc: str | None = None,
    **fields: object,
) -> Candidate:
    """A candidate whose kind and description come from the catalog."""
    e = catalog.get(name)
    assert e is not None, name
    return Candidate(unit, name, e.kind, desc or e.describe(**fields), node, replacement, note)


def statement_unit(src: Src, ctx: Context, node: cst.CSTNode, what: str) -> cst.CSTNode | None:
    unit = src.statement(node)
    if isinstance(unit, str):
        ctx.skip(src.path, src.line(node), f"{what} {unit}: not marked (move it to a statement of its own)")
        return None
    return unit


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
    values = [e.value for e in lst.elements]
    starts, ends = [src.line(v) for v in values], [src.end_line(v) for v in values]
    # A comment inside an element travels with its code.
    placed = src.comments(lst, [src.span(v) for v in values], starts, ends, len(values) - 1)
    out: list[str | BlockSeg] = []
    for i, el in enumerate(lst.elements):
        out.extend(f"{indent}{c}\n" for c in placed.get(i, []))
        out.append(segment(el))
    return out
