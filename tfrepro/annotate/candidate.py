"""A marking candidate: one statement, the feature it holds and its OFF
replacement (annotate/detect.py finds them, annotate/custom.py for layers)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tfrepro import catalog
from tfrepro.annotate.model import Context
from tfrepro.annotate.source import Src


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
