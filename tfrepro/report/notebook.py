"""repro.ipynb: the exported repro as a Colab-ready notebook (nbformat v4).

Cells: a title, an install cell pinning the exact versions the report ran
(`!pip install tensorflow==X keras==Y numpy==Z`), the script split at its
top-level structure (imports and data, model, training), then a cell that
checks for the symptom and says whether it showed. The TensorFlow form asks
for "a link to Colab/Jupyter/any notebook": a gist of this file is one.
"""

from __future__ import annotations

import ast

import nbformat
from nbformat import v4

from tfrepro.report.answer import Env

SETUP, LAYERS, DATA, MODEL, TRAINING = "Imports and setup", "Layers and functions", "Data", "Model", "Training"
_TRAIN_WORDS = (".fit(", "GradientTape", "train_step", "optimizer.apply", "__main__", "callbacks")
_MODEL_WORDS = ("Sequential(", "keras.Model(", "keras.Input(", ".compile(", "layers.")
_DATA_WORDS = ("Dataset", "np.random", "rng", ".batch(", "load", "TFRecord", "read_csv", "np.load")


def split_cells(source: str) -> list[tuple[str, str]]:
    """(section, code) chunks in source order: each top-level statement is
    imports/setup, layers and functions, data, model or training, and joins
    the chunk before it when it is the same kind or says nothing of its own.
    A chunk starts with the comments right above its first statement."""
    lines = source.splitlines()
    body = ast.parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the module docstring becomes the title cell
    cells: list[tuple[str, str]] = []
    start = _leading_comments(lines, body[0].lineno - 1) if body else 0
    for i, node in enumerate(body):
        end = _leading_comments(lines, body[i + 1].lineno - 1) if i + 1 < len(body) else len(lines)
        kind = _kind(ast.get_source_segment(source, node) or "", node) or (cells[-1][0] if cells else SETUP)
        chunk = "\n".join(lines[start:end]).strip("\n")
        if cells and cells[-1][0] == kind:
            cells[-1] = (kind, cells[-1][1] + "\n" + chunk)
        else:
            cells.append((kind, chunk))
        start = end
    return cells


def _leading_comments(lines: list[str], index: int) -> int:
    """Move a statement's start up over the comment lines right above it."""
    while index > 0 and lines[index - 1].lstrip().startswith("#"):
        index -= 1
    return index


def _kind(code: str, node: ast.stmt) -> str | None:
    rules = (  # the first that holds
        (SETUP, isinstance(node, (ast.Import, ast.ImportFrom))),
        (TRAINING, any(w in code for w in _TRAIN_WORDS)),
        (LAYERS, isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))),
        (MODEL, any(w in code for w in _MODEL_WORDS)),
        (DATA, any(w in code for w in _DATA_WORDS)),
    )
    return next((kind for kind, holds in rules if holds), None)


def check_cell(symptom: str) -> str:
    """A cell that finds the trained model(s) and tells whether the symptom shows."""
    head = (
        "# Symptom check: looks at every Keras model defined above.\n"
        "import numpy as np\n\n"
        "_models = [v for v in list(globals().values()) if hasattr(v, 'weights') and hasattr(v, 'fit')]\n"
        "_losses = [float(x) for m in _models for x in (getattr(getattr(m, 'history', None), 'history', None)"
        " or {}).get('loss', [])]\n"
        "_finite_w = all(np.isfinite(np.asarray(w)).all() for m in _models for w in m.weights)\n"
        "print('per-epoch loss:', _losses, '| weights finite:', _finite_w)\n"
    )
    if symptom == "nan":
        return head + (
            "_nan = (not _finite_w) or not all(np.isfinite(_losses))\n"
            "print('SYMPTOM REPRODUCED: non-finite loss or weights' if _nan "
            "else 'symptom NOT reproduced: loss and weights finite')\n"
        )
    if symptom == "crash":
        return head + "print('symptom NOT reproduced: training ran to the end without raising')\n"
    return head + (
        f"print('{symptom}: compare with reference.py (same script without the culprit), run the same way')\n"
    )


def build(code: str, *, symptom: str, env: Env, title: str) -> nbformat.NotebookNode:
    """The notebook for `code` (the exported repro.py), validated."""
    doc = ast.get_docstring(ast.parse(code)) or ""
    # the install cell: the exact versions the report's environment had (the probe names each dist)
    dists = (d or {} for d in (env.tf_dist, env.keras_dist, env.tf_keras_dist, env.numpy_dist))
    pins = [f"{d['name']}=={d['version']}" for d in dists if d.get("version")]
    cells = [
        v4.new_markdown_cell(f"# {title}\n\n{doc}\n\nRun all cells (in Colab: Runtime > Run all)."),
        v4.new_code_cell("!pip install " + (" ".join(pins) if pins else "tensorflow numpy")),
    ]
    for stage, chunk in split_cells(code):
        cells += [v4.new_markdown_cell(f"## {stage}"), v4.new_code_cell(chunk)]
    cells += [v4.new_markdown_cell("## Symptom check"), v4.new_code_cell(check_cell(symptom))]
    nb = v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "colab": {"provenance": []},
        },
    )
    nbformat.validate(nb)
    return nb
