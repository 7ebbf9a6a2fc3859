"""The tree shows the architecture: computed from the source (ast), not trusted.

- no cycle between packages (each subpackage of tfrepro, and each top-level
  module, is one node; TYPE_CHECKING-only imports do not count);
- nothing outside `bisect/` (the CLI aside) imports `tfrepro.bisect`;
- commands (`bisect`, `check`, `report`, `scaffold`, `annotate`) never import
  each other, and `trials` imports no command;
- code under `inside/` never imports tfrepro (it runs in the trial process);
- no module over 600 lines;
- nothing under tfrepro creates a path in `.tfrepro/` except `trials/state.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tfrepro"
SKIP_DIRS = {"templates", "examples"}
COMMANDS = {"bisect", "check", "report", "scaffold", "annotate"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] in SKIP_DIRS:
            continue
        parts = ["tfrepro", *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _runtime_imports(path: Path, module: str) -> set[str]:
    """Every tfrepro module imported at run time (anywhere in the file,
    functions included), without `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tfrepro"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            if base.startswith("tfrepro"):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _node(module: str) -> str:
    """The graph node of a module: its subpackage, or itself at the top."""
    parts = module.split(".")
    if len(parts) == 1:
        return "tfrepro"
    if (PKG / parts[1]).is_dir():
        return f"tfrepro.{parts[1]}"
    return f"tfrepro.{parts[1]}"


MODULES = _modules()
IMPORTS = {
    m: {i for i in _runtime_imports(p, m) if i in MODULES or i.rsplit(".", 1)[0] in MODULES} for m, p in MODULES.items()
}


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for m, deps in IMPORTS.items():
        a = _node(m)
        for d in deps:
            d = d if d in MODULES else d.rsplit(".", 1)[0]
            b = _node(d)
            if a != b and b != "tfrepro":  # `from tfrepro import __version__` is the root package
                g.setdefault(a, set()).add(b)
    return g


def _cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := dfs(m)):
                return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(g):
        if n not in state and (found := dfs(n)):
            return found
    return None


def test_the_package_import_graph_has_no_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def test_only_bisect_and_the_cli_import_tfrepro_bisect():
    offenders = sorted(
        m
        for m, deps in IMPORTS.items()
        if not m.startswith(("tfrepro.bisect", "tfrepro.cli")) and any(d.startswith("tfrepro.bisect") for d in deps)
    )
    assert offenders == []


def test_commands_do_not_import_each_other_and_trials_imports_no_command():
    bad = []
    for m, deps in IMPORTS.items():
        mine = _node(m).split(".")[-1]
        for d in deps:
            other = _node(d).split(".")[-1]
            if other in COMMANDS and other != mine and (mine in COMMANDS or mine == "trials"):
                # annotate is the one command whose recognisers sit below the project
                if other == "annotate" and mine != "bisect":
                    continue
                bad.append(f"{m} -> {d}")
    assert bad == []


def test_inside_code_never_imports_tfrepro():
    inside = [m for m in MODULES if m.startswith("tfrepro.inside.")]
    assert inside, "the inside package moved?"
    assert {m: sorted(IMPORTS[m]) for m in inside if IMPORTS[m]} == {}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_600_lines(module):
    n = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert n <= 600, f"{module}: {n} lines"


def test_only_the_state_owner_names_the_state_dir():
    """A second way to create paths under .tfrepro/ is how `.gitignore` went
    missing before: only projectfiles (the layout) spells the name; trials/state.py owns the paths."""
    allowed = {"tfrepro.projectfiles", "tfrepro.cli.bisect_cmds"}
    spelled = []
    for m, path in MODULES.items():
        if m in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == ".tfrepro":
                spelled.append(f"{m}:{node.lineno}")
    assert spelled == []
