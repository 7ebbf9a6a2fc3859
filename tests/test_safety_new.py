"""Issue 13: `tfrepro new --data` answers that land in Python source.

A data path is written as a Python string literal that evaluates to exactly
the path given, whatever it holds (quotes, backslashes, code); a path that
cannot be one line of source and a float that is not a finite, sensible
number are refused (exit code 2) before anything is written. Real copier,
the packaged templates, no TensorFlow.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_scaffold import _isolated, _leftovers  # noqa: F401  (_isolated: an autouse fixture)

from tfrepro.cli import main
from tfrepro.errors import UserError
from tfrepro.scaffold import generate
from tfrepro.scaffold.generate import new_project

DEFAULT_PATH = "data/train.npz"
INJECTION = 'x.npz"); __import__("os").system("touch pwned"); ("'
PATHS = {
    "injection": INJECTION,
    "windows": "C:\\data\\new.npz",
    "quotes": 'it\'s "quoted" data.npz',
    "triple-quotes": "a\"\"\"b'''c.npz",
    "non-ascii": "données/日本語 😀.npz",
}
FILES = ("repro.py", "make_sample_data.py")


def _generate(dest: Path, template: str, data_path: str) -> Path:
    new_project(dest, template=template, data={"data_source": "npz", "data_path": data_path, "features": "cache"})
    return dest


def _data_path_node(tree: ast.Module) -> ast.expr:
    """The last argument of `DATA_PATH = os.path.join(..., <path>)`."""
    [assign] = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["DATA_PATH"]
    ]
    assert isinstance(assign.value, ast.Call) and ast.unparse(assign.value.func) == "os.path.join"
    return assign.value.args[-1]


def _shape(tree: ast.Module, path: str) -> str:
    """The module with the path's literal blanked: the code around it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == path:
            node.value = "<path>"
    return ast.dump(tree)


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
    """The same project with the default data path, per template."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("new-baseline")
    mp.setenv("TFREPRO_CACHE_DIR", str(home / "cache"))
    mp.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    mp.setenv("GIT_AUTHOR_NAME", "T")
    mp.setenv("GIT_AUTHOR_EMAIL", "t@example.com")
    try:
        yield {t: _generate(home / t, t, DEFAULT_PATH) for t in ("image", "tabular")}
    finally:
        mp.undo()


@pytest.mark.parametrize("template", ["image", "tabular"])
@pytest.mark.parametrize("path", list(PATHS.values()), ids=list(PATHS))
def test_a_data_path_is_one_string_literal_equal_to_what_was_given(tmp_path, monkeypatch, baselines, template, path):
    dest = _generate(tmp_path / "r", template, path)
    for name in FILES:
        src = (dest / name).read_text(encoding="utf-8")
        tree = ast.parse(src)  # it parses
        node = _data_path_node(tree)
        assert isinstance(node, ast.Constant) and node.value == path  # exactly the given string
        assert ast.literal_eval(ast.get_source_segment(src, node)) == path
        # The path is used there and only there, and the code around it is
        # the code a plain path gets: nothing was added, nothing runs.
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == path]
        assert uses == [node]
        base = ast.parse((baselines[template] / name).read_text(encoding="utf-8"))
        assert _shape(tree, path) == _shape(base, DEFAULT_PATH)
    # Executing the assignment gives the path next to the script, and runs nothing else.
    line = next(
        ln for ln in (dest / "repro.py").read_text(encoding="utf-8").splitlines() if ln.startswith("DATA_PATH = ")
    )
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__file__": str(dest / "repro.py")}
    exec("import os\n" + line, scope)  # noqa: S102  (the line under test)
    assert scope["DATA_PATH"] == os.path.join(str(dest), path)
    assert not (tmp_path / "pwned").exists() and not (dest / "pwned").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "NaN"])
def test_a_float_that_is_not_finite_and_sensible_is_refused(tmp_path, value):
    result = CliRunner().invoke(main, ["new", str(tmp_path / "r"), "-d", f"learning_rate={value}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0] == f"Error: learning_rate={value!r} is not a finite number of at most 1e+06"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("value", ["a\nb.npz", "a\rb.npz", "a\x00b.npz", "a\u2028b.npz"])
def test_a_data_path_that_is_not_one_line_is_refused(tmp_path, value):
    result = CliRunner().invoke(main, ["new", str(tmp_path / "r"), "-d", "data_source=npz", "-d", f"data_path={value}"])
    assert result.exit_code == 2, result.output
    assert "data_path must be one line of printable text" in result.stderr
    assert _leftovers(tmp_path) == []


def test_the_template_questions_refuse_them_too(tmp_path, monkeypatch):
    """The copier validators (what an interactive `tfrepro new` and `tfrepro
    update` go through) refuse the same answers without the CLI's checks."""
    monkeypatch.setattr(generate, "_BAD_TEXT", re.compile(r"(?!)"))  # the CLI check matches nothing
    with pytest.raises(UserError, match="data_path.*one line of text"):
        new_project(tmp_path / "a", template="image", data={"data_source": "npz", "data_path": "a\nb.npz"})
    for bad in (float("nan"), float("inf"), 1e300):
        with pytest.raises(UserError, match="learning_rate.*positive, finite number"):
            new_project(tmp_path / "b", template="tabular", data={"learning_rate": bad})
    assert _leftovers(tmp_path) == []
