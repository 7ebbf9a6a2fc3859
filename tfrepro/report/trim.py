"""Trim an exported repro (libcst, source-preserving): what the export leaves
behind once the inactive feature code is gone.

- `X = X` self-assignments (a feature's OFF part that only kept a name);
- `strategy = tf.distribute.get_strategy()` whose only use is
  `with strategy.scope():`, the `with` unwrapped (the default strategy's
  scope does nothing);
- module-level imports no code uses any more (never `from __future__`,
  never a star import, none at all when the module defines `__all__`).

Dead assignments in general are left alone (a name read by `eval`, a
callback or another module cannot be told apart cheaply). The bundle
re-runs the trimmed repro and keeps the untrimmed one when the symptom no
longer shows.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst
import libcst.matchers as m

_SCOPE = m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("scope")), args=[])  # `NAME.scope()`
_GET_STRATEGY = m.Call(
    func=m.Attribute(value=m.Attribute(value=m.Name(), attr=m.Name("distribute")), attr=m.Name("get_strategy")), args=[]
)


def _names(tree: cst.CSTNode) -> Counter[str]:
    """How often each bare name is read or written (imports' own names excluded)."""
    imports = m.findall(tree, m.Import() | m.ImportFrom())
    seen = Counter(n.value for n in m.findall(tree, m.Name()))  # type: ignore[attr-defined]
    return seen - Counter(n.value for s in imports for n in m.findall(s, m.Name()))  # type: ignore[attr-defined]


def _scope_only_strategies(tree: cst.Module, counts: Counter[str]) -> set[str]:
    """Names bound once to get_strategy() and used only as `with NAME.scope():`."""
    found = m.findall(tree, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=_GET_STRATEGY))
    bound = [s.targets[0].target.value for s in found]  # type: ignore[attr-defined]
    withs = m.findall(tree, m.With(items=[m.WithItem(item=_SCOPE, asname=None)]))
    scopes = Counter(w.items[0].item.func.value.value for w in withs)  # type: ignore[attr-defined]
    return {n for n in bound if bound.count(n) == 1 and scopes[n] and counts[n] == 1 + scopes[n]}


class _Trim(cst.CSTTransformer):
    def __init__(self, strategies: set[str], unused: set[str]) -> None:
        self.strategies, self.unused, self.changes = strategies, unused, []

    def _drop_stmt(self, s: cst.BaseSmallStatement | None) -> bool:
        if not m.matches(s, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
            return False
        name = s.targets[0].target.value  # type: ignore[union-attr]
        if m.matches(s.value, m.Name(name)):  # type: ignore[union-attr]
            self.changes.append(f"removed the self-assignment {name} = {name}")
        elif name in self.strategies and m.matches(s.value, _GET_STRATEGY):  # type: ignore[union-attr]
            self.changes.append(f"removed {name} = ...get_strategy() and unwrapped `with {name}.scope():`")
        else:
            return False
        return True

    def leave_SimpleStatementLine(self, original, updated):
        s = updated.body[0] if len(updated.body) == 1 else None
        if self._drop_stmt(s):
            return cst.RemoveFromParent()
        if isinstance(s, (cst.Import, cst.ImportFrom)) and not isinstance(s.names, cst.ImportStar):
            if isinstance(s, cst.ImportFrom) and m.matches(s.module, m.Name("__future__")):
                return updated
            keep = [a for a in s.names if _bound(a) not in self.unused]
            if len(keep) == len(s.names):
                return updated
            self.changes.extend(f"removed the unused import {_bound(a)}" for a in s.names if a not in keep)
            if not keep:
                return cst.RemoveFromParent()
            keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(body=[s.with_changes(names=keep)])
        return updated

    def leave_With(self, original, updated):
        scoped = len(updated.items) == 1 and m.matches(updated.items[0].item, _SCOPE)
        if scoped and updated.items[0].item.func.value.value in self.strategies:  # type: ignore[attr-defined]
            return cst.FlattenSentinel(list(updated.body.body))  # type: ignore[attr-defined]
        return updated


def _bound(alias: cst.ImportAlias) -> str:
    return alias.evaluated_alias or alias.evaluated_name.split(".")[0]  # `import a.b` binds `a`


def trim_source(text: str) -> tuple[str, list[str]]:
    """(trimmed text, what was removed); the text unchanged when it does not parse."""
    try:
        tree = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return text, []
    changes: list[str] = []
    for _ in range(3):  # removing one thing can make an import unused
        counts = _names(tree)
        imports = [s for s in m.findall(tree, m.Import() | m.ImportFrom()) if not isinstance(s.names, cst.ImportStar)]
        imported = {_bound(a) for s in imports for a in s.names}  # type: ignore[attr-defined]
        unused = set() if counts["__all__"] else {n for n in imported if not counts[n]}
        t = _Trim(_scope_only_strategies(tree, counts), unused)
        new = tree.visit(t)
        if not t.changes:
            break
        tree, changes = new, changes + t.changes
    return tree.code, changes


def trim_files(files: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Every .py file trimmed (a name another module imports from this one
    is not seen: the bundle's re-run is what guards against that)."""
    out, changes = {}, []
    for rel, text in files.items():
        new, done = trim_source(text) if rel.endswith(".py") else (text, [])
        out[rel] = new
        changes.extend(f"{rel}: {c}" for c in done)
    return out, changes
