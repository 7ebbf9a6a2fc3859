"""Real-data reduction (report/reduce.py): ddmin over chunks then records,
with a fake re-run; records of .npy, text and TFRecord files; the rewritten
repro writes temp files of the original format (no TensorFlow)."""

from __future__ import annotations

import io
import struct

import numpy as np

from tfrepro.report import reduce as rd
from tfrepro.report.export import Export
from tfrepro.report.standin import Read


def test_ddmin_over_chunks_then_records_keeps_only_the_bad_ones():
    bad = {613, 618}
    seen = []

    def shows(keep):
        seen.append(len(keep))
        return bad <= set(keep)

    kept, tests = rd.reduce_records(640, 16, shows)
    assert kept == [613, 618] and tests == len(seen)
    assert tests < 40  # far fewer re-runs than records


def test_records_of_npy_text_and_tfrecord(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12).reshape(6, 2))
    (tmp_path / "t.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    frames = b"".join(struct.pack("<Q", len(p)) + b"\0" * 4 + p + b"\0" * 4 for p in (b"one", b"three"))
    (tmp_path / "r.tfrecord").write_bytes(frames)
    npy = rd.read_records(tmp_path, Read("numpy.load", "x.npy"))
    text = rd.read_records(tmp_path, Read("numpy.loadtxt", "t.csv"))
    rec = rd.read_records(tmp_path, Read("tf.data.TFRecordDataset", "r.tfrecord"))
    assert (len(npy.items), len(text.items), len(rec.items)) == (6, 3, 2)
    assert text.header == b"a,b\n" and rec.items == [b"one", b"three"]
    assert rd.read_records(tmp_path, Read("numpy.load", "missing.npy")) is None


def test_the_reduced_repro_reads_the_kept_records_in_the_original_format(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12).reshape(6, 2))
    (tmp_path / "t.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    sites = [
        Read("numpy.load", "x.npy", "train.py:3"),
        Read("numpy.loadtxt", "t.csv", "train.py:4"),
    ]
    groups = [(0, rd.read_records(tmp_path, sites[0]))]
    text = "import numpy as np\n\nx = np.load('data/x.npy')\n"
    new = rd.rewrite_reads(text, groups)
    assert "np.load(_tfrepro_file(0))" in new
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "repro.py").write_text(new)
    (bundle / "data.npz").write_bytes(rd.npz_bytes(groups, [1, 4]))
    scope = {"__file__": str(bundle / "repro.py"), "__name__": "x"}
    exec(compile(new, "repro.py", "exec"), scope)
    assert scope["x"].tolist() == [[2, 3], [8, 9]]
    text_groups = [(0, rd.read_records(tmp_path, sites[1]))]
    (bundle / "data.npz").write_bytes(rd.npz_bytes(text_groups, [2]))
    new = rd.rewrite_reads("import numpy as np\nt = np.loadtxt('t.csv', delimiter=',', skiprows=1)\n", text_groups)
    exec(compile(new, "repro.py", "exec"), scope)
    assert scope["t"].tolist() == [5.0, 6.0]


def test_a_read_of_another_literal_file_keeps_its_path(tmp_path):
    """The reduction matches a recorded read to its call as the stand-ins do
    (standin.swap_reads): a call of the same function whose literal file is
    another one is not the recorded read."""
    np.save(tmp_path / "x.npy", np.arange(12).reshape(6, 2))
    groups = [(0, rd.read_records(tmp_path, Read("numpy.load", "x.npy", "train.py:4")))]
    new = rd.rewrite_reads("import numpy as np\nmeta = np.load('meta.npy')\nx = np.load('x.npy')\n", groups)
    assert "meta = np.load('meta.npy')" in new and "x = np.load(_tfrepro_file(0))" in new


def test_the_reduced_repro_leaves_no_temp_file_behind(tmp_path):
    """The kept records are written to a temp file in their original format
    for the script to read; a maintainer running repro.py again and again
    must not collect them in /tmp."""
    import subprocess
    import sys

    np.save(tmp_path / "x.npy", np.arange(12).reshape(6, 2))
    groups = [(0, rd.read_records(tmp_path, Read("numpy.load", "x.npy", "train.py:3")))]
    bundle, scratch = tmp_path / "bundle", tmp_path / "tmp"
    bundle.mkdir()
    scratch.mkdir()
    (bundle / "repro.py").write_text(
        rd.rewrite_reads("import numpy as np\nx = np.load('x.npy')\nprint(x.sum())\n", groups)
    )
    (bundle / "data.npz").write_bytes(rd.npz_bytes(groups, [1, 4]))
    env = {**__import__("os").environ, "TMPDIR": str(scratch)}
    got = subprocess.run([sys.executable, "repro.py"], cwd=bundle, env=env, capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout.strip() == "22", got.stderr
    assert list(scratch.iterdir()) == []


def test_tfrecord_frames_carry_the_masked_crc32c():
    scope: dict = {"__name__": "x"}
    exec(compile(rd.HEADER.replace("kinds_literal", "{}"), "h.py", "exec"), scope)
    crc = 0xE3069283  # CRC-32C of b"123456789"
    assert scope["_tfrepro_crc"](b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_a_reduction_that_keeps_too_much_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(200).reshape(100, 2))
    sites = [Read("numpy.load", "x.npy", "train.py:3")]
    export = Export(None, None, {"repro.py": "import numpy as np\nx = np.load('x.npy')\n"}, {})
    got = rd.reduce_export(tmp_path, export, sites, 10, lambda files: True)
    assert got.records <= 1  # any record shows it: at most one is kept
    got = rd.reduce_export(tmp_path, export, sites, 10, lambda e: _rows(e.data) >= 50)
    assert "too many" in got.error


def _rows(data: bytes) -> int:
    import io

    saved = np.load(io.BytesIO(data))
    return len(saved["f0_rows"])


REDUCED_SRC = '''"""Reads its rows from a .npy file; row 7 makes the NaN."""
import numpy as np

# tfrepro: feature bad_rows -- train on the raw rows
# x = np.load("data/x.npy")
# tfrepro: else
x = np.load("data/x.npy")
# tfrepro: end
'''


def test_after_a_reduction_reference_py_reads_the_kept_records_too(tmp_path, monkeypatch):
    """The bundle's reference.py reads data.npz as repro.py does, never the user's file (issue 27)."""
    import io

    from report_fakes import build, trial

    from tfrepro.trials.values import TrialResult

    monkeypatch.setattr("tfrepro.report.tables.have_tensorboard", lambda: False)
    run = _reduced_run(tmp_path)
    root = tmp_path / "home" / "alice" / "proj"
    seen = []

    def runner(project_dir, settings):
        src = (project_dir / settings.entry).read_text()
        npz = project_dir / "data.npz"
        rows = np.load(io.BytesIO(npz.read_bytes()))["f0_rows"] if npz.is_file() else np.load(root / "data/x.npy")
        seen.append(("_tfrepro_file(0)" in src, len(rows)))
        bad = 14.0 in rows  # row 7: [14, 15]
        return TrialResult.from_dict(trial(losses=(1.0, float("nan")), first_nonfinite_step=2) if bad else trial())

    b = build(run, runner)
    for name in ("repro.py", "reference.py"):
        text = (b.out / name).read_text()
        assert "np.load(_tfrepro_file(0))" in text and "data/x.npy" not in text, name
    red = b.report.data["reduction"]
    assert red["records"] == 1 and red["of"] == 20 and "ref_text" not in red
    assert np.load(b.out / "data.npz")["f0_rows"].tolist() == [[14.0, 15.0]]
    assert b.report.rerun.reproduced is True and seen[-1] == (True, 1)


def _reduced_run(tmp_path, *, helper: bool = False):
    """A run whose NaN shows in row 7 of data/x.npy read by repro.py (and,
    with `helper`, a module the script imports: a multi-file reference)."""
    import json

    from report_fakes import make_run

    root = tmp_path / "home" / "alice" / "proj"
    (root / "data").mkdir(parents=True)
    imports = "import numpy as np\nimport helpers\n" if helper else "import numpy as np\n"
    tail = "print(helpers.total(x))\n" if helper else ""
    (root / "repro.py").write_text(REDUCED_SRC.replace("import numpy as np\n", imports) + tail)
    (root / "helpers.py").write_text("def total(x):\n    return float(x.sum())\n")
    np.save(root / "data" / "x.npy", np.arange(40.0).reshape(20, 2))
    run = make_run(root, "nan", ["bad_rows"])
    result = json.loads((run / "result.json").read_text())
    sources = [{"call": "numpy.load", "file": "data/x.npy", "at": "repro.py:6"}]
    for key in ("failing", "culprit_trial"):
        result[key]["data"] = {"sources": sources, "fits": [{"batches_per_epoch": 4, "sources_seen": True}]}
    (run / "result.json").write_text(json.dumps(result))
    return run


def _nan_with_row_7(project_dir, settings):
    """The re-run's trial: a NaN when the data.npz beside the entry holds row 7 ([14, 15])."""
    from report_fakes import trial

    from tfrepro.trials.values import TrialResult

    npz = project_dir / "data.npz"
    bad = npz.is_file() and 14.0 in np.load(npz)["f0_rows"]
    return TrialResult.from_dict(trial(losses=(1.0, float("nan")), first_nonfinite_step=2) if bad else trial())


def test_a_multi_file_reference_finds_the_kept_records_beside_it(tmp_path, monkeypatch):
    """A reference of several files lies under reference/; its rewritten reads
    load data.npz beside reference/repro.py, so the bundle puts the records
    there too (it wrote only the top one: `python reference/repro.py` failed)."""
    import subprocess
    import sys

    from report_fakes import build

    monkeypatch.setattr("tfrepro.report.tables.have_tensorboard", lambda: False)
    b = build(_reduced_run(tmp_path, helper=True), _nan_with_row_7)
    assert b.report.repro.reference == "reference/repro.py" and (b.out / "reference" / "helpers.py").is_file()
    assert b.report.repro.diff.startswith("--- reference/repro.py\n+++ repro.py\n")  # the file the diff is from
    assert "np.load(_tfrepro_file(0))" in (b.out / "reference" / "repro.py").read_text()
    for script in ("repro.py", "reference/repro.py"):  # each as its artifacts line says: `python <script>`
        got = subprocess.run([sys.executable, script], cwd=b.out, capture_output=True, text=True)
        assert got.returncode == 0 and got.stdout.splitlines()[0] == "29.0", (script, got.stderr)


def test_the_localisation_of_a_reduced_repro_reads_the_kept_records(tmp_path, monkeypatch):
    """check_numerics runs the repro the bundle ships: its files and, beside
    its entry, the records the reduction kept (Export.data)."""
    from report_fakes import build

    from tfrepro.report import localize
    from tfrepro.report.answer import Localization

    seen = []

    def fake(files, data=None, **kw):
        seen.append((sorted(files), np.load(io.BytesIO(data))["f0_rows"].tolist() if data else None))
        return Localization(note="fake")

    monkeypatch.setattr("tfrepro.report.tables.have_tensorboard", lambda: False)
    monkeypatch.setattr(localize, "localize", fake)
    b = build(_reduced_run(tmp_path), _nan_with_row_7, localize=True)
    assert b.report.data["reduction"]["records"] == 1
    assert seen == [(["repro.py"], [[14.0, 15.0]])]


def test_the_nightly_rerun_of_a_reduced_repro_reads_the_kept_records(tmp_path, monkeypatch):
    """`report --nightly` re-runs the repro the bundle ships, data.npz with it
    (it got the export without data.npz: a reduced repro never showed its
    symptom on nightly, which the form then called fixed)."""
    from report_fakes import build

    from tfrepro.report import rerun as nightly
    from tfrepro.report.answer import NightlyRun

    monkeypatch.setattr("tfrepro.report.tables.have_tensorboard", lambda: False)
    monkeypatch.setattr(nightly, "nightly_env", lambda say: "an environment")
    monkeypatch.setattr(
        nightly, "on_nightly", lambda again, env: NightlyRun("tf-nightly", again(_nan_with_row_7).reproduced)
    )
    b = build(_reduced_run(tmp_path), _nan_with_row_7, nightly=True)
    assert b.report.data["reduction"]["records"] == 1 and b.report.rerun.reproduced is True
    assert b.report.nightly.reproduced is True


def test_the_notebook_of_a_reduced_repro_reads_the_kept_records(tmp_path, monkeypatch):
    """repro.ipynb is repro.py in cells, run by a kernel whose namespace has no
    `__file__` and whose cwd is the notebook's dir: the kept records are found
    there (before: NameError on `__file__`)."""
    from tfrepro.report import notebook
    from tfrepro.report.answer import Env

    np.save(tmp_path / "x.npy", np.arange(12).reshape(6, 2))
    groups = [(0, rd.read_records(tmp_path, Read("numpy.load", "x.npy", "train.py:3")))]
    text = rd.rewrite_reads("import numpy as np\nx = np.load('x.npy')\nTOTAL = int(x.sum())\n", groups)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "data.npz").write_bytes(rd.npz_bytes(groups, [1, 4]))
    nb = notebook.build(text, symptom="nan", env=Env(), title="t")
    monkeypatch.chdir(bundle)
    scope: dict = {"__name__": "__main__"}
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.source.startswith("!") and "TOTAL" not in scope:
            exec(compile(cell.source, "<cell>", "exec"), scope)
    assert scope["TOTAL"] == 22
