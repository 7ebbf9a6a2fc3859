"""Data stand-ins (report/standin.py): the exported repro's data reads
rewritten into seeded synthetic NumPy data of the recorded spec and
statistics (no TensorFlow; the rewritten code is executed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tfrepro.report.answer import of
from tfrepro.report.export import Export
from tfrepro.report.reduce import choose_data
from tfrepro.report.standin import Read, issue_lines, rewrite

SCRIPT = '''"""A training script."""
from __future__ import annotations

import numpy as np

table = np.loadtxt("data/customers.csv", delimiter=",", skiprows=1)
x = np.load(path_of("x.npy"))
labels = np.load("data/labels.npy")
'''

COLS = {
    "x[:, 0]": {
        "dtype": "float32",
        "count": 100,
        "nan": 0,
        "inf": 0,
        "min": 18.0,
        "max": 90.0,
        "mean": 50.0,
        "std": 20.0,
        "zero_frac": 0.0,
    },
    "x[:, 1]": {
        "dtype": "float32",
        "count": 100,
        "nan": 3,
        "inf": 0,
        "min": 0.0,
        "max": 9.0,
        "mean": 4.0,
        "std": 2.0,
        "zero_frac": 0.25,
    },
}


def source(call, file, line, value):
    return {"call": call, "file": file, "at": f"train.py:{line}", "value": value}


SOURCES = [
    source(
        "numpy.loadtxt",
        "data/customers.csv",
        6,
        {"type": "array", "shape": [400, 2], "dtype": "float32", "columns": COLS},
    ),
    source("numpy.load", "x.npy", 7, None),  # an .npz, or a value not recorded: no stand-in
    source(
        "numpy.load",
        "data/labels.npy",
        8,
        {
            "type": "array",
            "shape": [400],
            "dtype": "int64",
            "columns": {
                "x": {
                    "dtype": "int64",
                    "count": 400,
                    "nan": 0,
                    "inf": 0,
                    "min": 0.0,
                    "max": 2.0,
                    "mean": 1.0,
                    "std": 0.8,
                    "zero_frac": 0.3,
                    "distinct": [0, 1, 2],
                }
            },
        },
    ),
]


def run(text: str) -> dict:
    scope: dict = {"path_of": lambda name: name, "__name__": "x"}
    try:
        exec(compile(text, "repro.py", "exec"), scope)
    except FileNotFoundError as e:
        scope["error"] = str(e)
    return scope


def test_reads_become_seeded_data_of_the_recorded_spec():
    text, replaced = rewrite(SCRIPT, [of(Read, s) for s in sorted(SOURCES, key=lambda s: s["at"])])
    assert [s.file for s in replaced] == ["data/customers.csv", "data/labels.npy"]
    assert text.index("from __future__") < text.index("_tfrepro_data") and 'np.load(path_of("x.npy"))' in text
    scope = run(text.replace('np.load(path_of("x.npy"))', "None"))
    table, labels = scope["table"], scope["labels"]
    assert table.shape == (400, 2) and table.dtype == np.float32
    assert 18 <= np.nanmin(table[:, 0]) and np.nanmax(table[:, 0]) <= 90
    assert (table[:, 1] == 0).mean() >= 0.2  # the recorded zeros (the NaN's cause) are there
    assert np.isnan(table[:, 1]).sum() == 12  # 3 of 100 counted, scaled to 400 rows
    assert labels.dtype == np.int64 and set(np.unique(labels)) <= {0, 1, 2}
    again = run(text.replace('np.load(path_of("x.npy"))', "None"))
    assert np.array_equal(again["table"], table, equal_nan=True)  # seeded


def test_export_with_standins_and_what_issue_md_says():
    export = Export(["f"], [], {"repro.py": SCRIPT}, {"repro.py": SCRIPT})
    result = {
        "failing": {"data": {"sources": SOURCES, "fits": [{"at": "train.py:20", "kind": "tf.data", "sources_seen": 0}]}}
    }
    got, doc = choose_data(Path("."), result, "train.py", export, check=lambda tried: None)
    assert "_tfrepro_data(0)" in got.cand_files["repro.py"] and "_tfrepro_data(0)" in got.ref_files["repro.py"]
    assert [s.file for s in doc.standins] == ["data/customers.csv", "data/labels.npy"]
    assert [s.file for s in doc.needs_user_data] == ["x.npy"]
    assert doc.unseen == ("train.py:20",)
    text = "\n".join(issue_lines({**doc.to_dict(), "standin_reproduced": True}))
    assert "`data/customers.csv` (numpy.loadtxt at train.py:6, 400x2)" in text and "still shows" in text
    assert "needs the user's data" in text and "train.py:20" in text


def test_no_data_ships_nothing_and_says_so():
    export = Export(["f"], [], {"repro.py": SCRIPT}, {})
    result = {"failing": {"data": {"sources": SOURCES}}}
    got, doc = choose_data(Path("."), result, "train.py", export, check=pytest.fail, no_data=True)
    assert got is export and not doc.standins and len(doc.needs_user_data) == 3
    assert "--no-data" in doc.note
