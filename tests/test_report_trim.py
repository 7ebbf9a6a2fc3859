"""Trimmed exports: what the export leaves behind goes, when a re-run agrees."""

from __future__ import annotations

import json

import pytest
from report_fakes import ScriptedRunner, build, make_project, make_run

from tfrepro.report.rerun import trim_source

SRC = """from __future__ import annotations

import os, sys
import tempfile
import numpy as np
import tensorflow as tf
from keras import layers as L, models

x = 1
x = x
strategy = tf.distribute.get_strategy()
with strategy.scope():
    model = models.Sequential()
    model.compile()
print(np.zeros(1), sys.argv, x)
"""

TRIMMED = """from __future__ import annotations

import sys
import numpy as np
from keras import models

x = 1
model = models.Sequential()
model.compile()
print(np.zeros(1), sys.argv, x)
"""


def test_trim_removes_unused_imports_self_assignments_and_the_default_strategy_scope():
    text, changes = trim_source(SRC)
    assert text == TRIMMED
    assert changes == [
        "removed the unused import os",
        "removed the unused import tempfile",
        "removed the unused import L",
        "removed the self-assignment x = x",
        "removed strategy = ...get_strategy() and unwrapped `with strategy.scope():`",
        "removed the unused import tf",
    ]


@pytest.mark.parametrize(
    "src",
    [
        "import os\n__all__ = ['os']\n",  # a module that re-exports
        "import tensorflow as tf\ns = tf.distribute.get_strategy()\nwith s.scope():\n    pass\nprint(s)\n",
        "from x import *\n",
        "def f(:\n",  # does not parse: left alone
    ],
)
def test_trim_leaves_alone_what_it_cannot_prove_unused(src):
    assert trim_source(src) == (src, [])


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path)


def test_bundle_keeps_the_trimmed_repro_when_it_reproduces(project):
    b = build(make_run(project, "nan", ["mixed_precision"]), ScriptedRunner())
    repro = (b.out / "repro.py").read_text()
    assert "import numpy as np" not in repro and "import tensorflow as tf" not in repro
    doc = json.loads((b.out / "report.json").read_text())
    assert doc["repro"]["trimmed"] is True and doc["reproduction"]["reproduced"] is True
    assert "repro.py: removed the unused import np" in doc["repro"]["trim"]["changes"]


class NeedsNumpy(ScriptedRunner):
    """The symptom needs an import the trim removes (a side effect of importing)."""

    def __call__(self, project_dir, settings):
        result = super().__call__(project_dir, settings)
        if "import numpy as np" not in (project_dir / settings.entry).read_text():
            return ScriptedRunner(healthy=True)(project_dir, settings)
        return result


def test_bundle_falls_back_to_the_untrimmed_repro(project):
    runner = NeedsNumpy()
    b = build(make_run(project, "nan", ["mixed_precision"]), runner)
    assert "import numpy as np" in (b.out / "repro.py").read_text()
    doc = json.loads((b.out / "report.json").read_text())
    assert doc["repro"]["trimmed"] is False and doc["reproduction"]["reproduced"] is True
    assert doc["repro"]["trim"]["note"] == "the trimmed repro did not reproduce; untrimmed kept"
    assert len(runner.calls) == 2


def test_no_rerun_ships_the_untrimmed_repro(project):
    b = build(make_run(project, "nan", ["mixed_precision"]), ScriptedRunner(), rerun=False)
    assert "import numpy as np" in (b.out / "repro.py").read_text()
    assert json.loads((b.out / "report.json").read_text())["repro"]["trimmed"] is False
