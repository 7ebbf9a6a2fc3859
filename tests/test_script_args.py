"""Issue 26: scripts that take arguments (`tfrepro bisect train.py -- --epochs 3`)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tfrepro.cli import main
from tfrepro.project import Project
from tfrepro.report.scan import default_args, notebook_code, script_args
from tfrepro.settings import TrialSettings
from tfrepro.trials.runner import _crash_line, usage_error

SCRIPT = """\
import argparse

import tensorflow as tf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, required=True)
    args = ap.parse_args()
    ds = tf.data.Dataset.range(8).batch(2)
    ds = ds.prefetch(2)
    print(args.epochs, ds)


if __name__ == "__main__":
    main()
"""


def test_the_arguments_reach_every_trial_command(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    p = Project.load(tmp_path / "train.py", script_args=("--epochs", "3"))
    assert p.manifest.trial.command == ("python", "train.py", "--epochs", "3")
    assert Project.load(tmp_path / "train.py").manifest.trial.command is None
    (tmp_path / "tfrepro.toml").write_text('[trial]\ncommand = ["python", "-m", "pkg"]\n')
    cmd = Project.load(tmp_path, script_args=["-v"]).manifest.trial.command
    assert cmd == ("python", "-m", "pkg", "-v")


def test_the_cli_takes_them_after_a_double_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    r = CliRunner().invoke(main, ["features", "train.py", "--json", "--", "--epochs", "3"])
    assert r.exit_code == 0, r.output
    assert [f["name"] for f in json.loads(r.stdout)["features"]] == ["prefetch"]


def test_argparse_usage_error_points_at_the_double_dash(tmp_path):
    err = tmp_path / "stderr.log"
    err.write_text(
        "usage: train.py [-h] --epochs EPOCHS\ntrain.py: error: the following arguments are required: --epochs\n"
        "E0000 cuda_platform.cc:52] failed call to cuInit\n"  # TensorFlow's log may come after it
    )
    assert usage_error(2, err) is not None and usage_error(1, err) is None
    line = _crash_line(2, err)
    assert line.startswith("train.py: error: the following arguments are required: --epochs")
    assert "after `--`" in line and "tfrepro bisect train.py -- --epochs 3" in line
    other = tmp_path / "other.log"
    other.write_text("Traceback ...\nValueError: boom\n")
    assert _crash_line(2, other) == "ValueError: boom"


def test_the_report_keeps_them_in_a_comment_and_in_the_notebook():
    settings = TrialSettings(entry="train.py", command=("python", "train.py", "--epochs", "3", "--data", "./x y"))
    args = script_args(settings, "train.py")
    assert args == ["--epochs", "3", "--data", "./x y"]
    text = default_args("#!/usr/bin/env python\nimport os\n(\n", "repro.py", args)  # does not parse: a comment
    assert text.splitlines()[:2] == [
        "#!/usr/bin/env python",
        "# run it with its arguments: python repro.py --epochs 3 --data './x y'",
    ]
    code = notebook_code("import os\n", "repro.py", args)
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - our own two lines
    assert ns["sys"].argv == ["repro.py", "--epochs", "3", "--data", "./x y"]
    assert default_args("x = (\n", "repro.py", []) == "x = (\n" and script_args(TrialSettings(), "repro.py") == []


def _argv_after(text: str, given: list[str]) -> list[str]:
    import sys as real_sys

    saved = real_sys.argv
    real_sys.argv = ["repro.py", *given]
    try:
        ns: dict = {"__name__": "repro"}
        exec(compile(text, "repro.py", "exec"), ns)  # noqa: S102 - the text built here
        return list(real_sys.argv[1:])
    finally:
        real_sys.argv = saved


def test_a_plain_python_repro_py_runs_with_the_runs_arguments_and_given_ones_win():
    from tfrepro.report.scan import default_args

    args = ["--epochs", "3", "--data", "./x y"]
    doc = '"""My script."""\nfrom __future__ import annotations\n\nimport os\n'
    text = default_args(doc, "repro.py", args)
    assert text.startswith('"""My script."""\nfrom __future__ import annotations\nimport sys  # (tfrepro)')
    assert _argv_after(text, []) == args and _argv_after(text, ["--epochs", "1"]) == ["--epochs", "1"]
    shebang = default_args("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport os\n", "repro.py", args)
    assert shebang.splitlines()[:3] == ["#!/usr/bin/env python", "# -*- coding: utf-8 -*-", shebang.splitlines()[2]]
    assert shebang.splitlines()[2].startswith("import sys") and _argv_after(shebang, []) == args
    assert default_args("x = 1\n", "repro.py", []) == "x = 1\n"


def test_the_reports_repro_and_reference_take_the_runs_arguments(tmp_path):
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from report_fakes import ScriptedRunner, build, make_project, make_run

    root = make_project(tmp_path)
    settings = TrialSettings(steps=8, command=("python", "repro.py", "--epochs", "3")).to_dict()
    run = make_run(root, "nan", ["mixed_precision"], settings=settings)
    bundle = build(run, ScriptedRunner())
    for name in ("repro.py", "reference.py"):
        text = (bundle.out / name).read_text()
        assert "if len(sys.argv) == 1:\n    sys.argv += ['--epochs', '3']\n" in text, name
        assert text.index("import sys") > text.index('"""Tiny marked project')  # after the docstring


def test_a_run_of_train_py_with_arguments_is_reported_without_a_toml_entry(tmp_path):
    # `tfrepro bisect train.py -- --epochs 3` in a project whose tfrepro.toml
    # names no entry: the report loads train.py, as the run did (it said "the
    # trial entry 'repro.py' does not exist").
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from report_fakes import ScriptedRunner, build, make_project, make_run

    root = make_project(tmp_path)
    (root / "repro.py").rename(root / "train.py")
    settings = TrialSettings(steps=8, entry="train.py", command=("python", "train.py", "--epochs", "3")).to_dict()
    bundle = build(make_run(root, "nan", ["mixed_precision"], settings=settings), ScriptedRunner())
    assert "sys.argv += ['--epochs', '3']" in (bundle.out / "repro.py").read_text()
