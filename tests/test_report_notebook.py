"""repro.ipynb: valid nbformat v4, exact versions pinned, the repro in cells,
and (e2e) its code cells show the symptom when run."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from report_fakes import ScriptedRunner, build, make_project, make_run

from tfrepro.project import Project
from tfrepro.report import notebook
from tfrepro.report.answer import Env

EXAMPLES = Path(__file__).resolve().parents[1] / "tfrepro" / "examples"
ENV = Env(
    tf_dist={"name": "tensorflow", "version": "2.21.0"},
    keras_dist={"name": "keras", "version": "3.12.0"},
    numpy_dist={"name": "numpy", "version": "2.1.3"},
)


def demo_repro() -> str:
    return Project.load(EXAMPLES / "demo").render(["mixed_precision"], export=True)["repro.py"]


def code_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_notebook_pins_versions_and_splits_the_script_at_its_structure():
    nb = notebook.build(demo_repro(), symptom="nan", env=ENV, title="NaN/Inf loss with mixed_precision")
    nbformat.validate(nb)
    assert nb.nbformat == 4
    cells = code_cells(nb)
    assert cells[0] == "!pip install tensorflow==2.21.0 keras==3.12.0 numpy==2.1.3"
    headings = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert headings == [
        "## Imports and setup",
        "## Layers and functions",
        "## Data",
        "## Model",
        "## Training",
        "## Symptom check",
    ]
    setup, layers, data, model, train, check = cells[1:]
    assert "import tensorflow as tf" in setup and 'set_global_policy("mixed_float16")' in setup
    assert layers.startswith("class Standardize")
    assert data.startswith("# Synthetic data") and "ds = ds.repeat()" in data
    assert model.startswith("model = keras.Sequential(") and "model.compile(" in model
    assert "model.fit(" in train and "callbacks = []" in train
    assert "SYMPTOM REPRODUCED" in check
    # Nothing lost or reordered: the cells hold the script's statements in order.
    script = "\n".join(cells[1:-1])
    assert [line for line in script.splitlines() if line.strip()] == [
        line for line in demo_repro().split('"""', 2)[2].splitlines() if line.strip()
    ]


def test_bundle_holds_the_notebook_and_the_issue_says_to_gist_it(tmp_path):
    run = make_run(make_project(tmp_path), "nan", ["mixed_precision"])
    b = build(run, ScriptedRunner())
    nb = nbformat.read(b.out / "repro.ipynb", as_version=4)
    nbformat.validate(nb)
    assert any("mixed_float16" in c for c in code_cells(nb))
    issue = (b.out / "ISSUE.md").read_text()
    assert "upload `repro.ipynb` as a gist" in issue


@pytest.mark.e2e
def test_notebook_cells_show_the_symptom_with_the_installed_versions(tmp_path):
    env = Env(
        tf_dist={"name": "tensorflow", "version": metadata.version("tensorflow")},
        keras_dist={"name": "keras", "version": metadata.version("keras")},
    )
    nb = notebook.build(demo_repro(), symptom="nan", env=env, title="demo")
    cells = code_cells(nb)
    assert cells[0].startswith(f"!pip install tensorflow=={metadata.version('tensorflow')} ")
    script = tmp_path / "cells.py"
    script.write_text("\n\n".join(c for c in cells if not c.startswith("!")))
    got = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    assert got.returncode == 0, got.stderr[-3000:]
    assert "SYMPTOM REPRODUCED" in got.stdout, got.stdout[-2000:]
