"""The CLI as a whole: every command has help, start-up stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from tfrepro import __version__
from tfrepro.cli import main

COMMANDS = sorted(main.commands)


def test_version():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name):
    r = CliRunner().invoke(main, [name, "--help"])
    assert r.exit_code == 0, r.output
    assert main.commands[name].help, f"`tfrepro {name}` has no docstring"
    assert "Usage: main " + name in r.output or f"Usage: tfrepro {name}" in r.output


def test_help_and_version_do_not_import_heavy_modules():
    # `tfrepro --help` must answer instantly: no TensorFlow (or copier, git,
    # matplotlib) in the CLI process unless a command needs it.
    code = (
        "import sys, runpy\n"
        "from click.testing import CliRunner\n"
        "from tfrepro.cli import main\n"
        "for args in (['--help'], ['--version']) + tuple([c, '--help'] for c in main.commands):\n"
        "    assert CliRunner().invoke(main, args).exit_code == 0, args\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'copier', 'git', 'matplotlib', 'ray') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_symptom_choices_are_the_one_symptom_order_read_without_importing_trials():
    """`--symptom` lists SYMPTOM_ORDER (tfrepro/verdicts.py, the order the
    bisect picks in) and the CLI's start-up imports no `tfrepro.trials`."""
    from tfrepro.verdicts import SYMPTOM_ORDER

    r = CliRunner().invoke(main, ["bisect", "--help"])
    assert "[" + "|".join(v.value for v in SYMPTOM_ORDER) + "]" in " ".join(r.output.split())
    code = "import sys\nimport tfrepro.cli\nprint(sorted(m for m in sys.modules if m.startswith('tfrepro.trials')))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_plain_scripts_features_do_not_import_pydantic(tmp_path):
    """pydantic validates a tfrepro.toml and is imported only when there is
    one: `tfrepro features train.py` on a plain script (the README's loop)
    does not pay for it (manifest_schema.py); with a tfrepro.toml it does."""
    (tmp_path / "train.py").write_text("import keras\nmodel = keras.Sequential()\nmodel.fit([], [], epochs=1)\n")
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from tfrepro.cli import main\n"
        "r = CliRunner().invoke(main, ['features', sys.argv[1]])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('pydantic' in sys.modules)\n"
    )
    run = lambda: subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "train.py")], capture_output=True, text=True
    )
    out = run()
    assert out.stdout.strip() == "False", out.stderr
    (tmp_path / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\n')
    assert run().stdout.strip() == "True"


def test_unknown_command_is_a_usage_error():
    r = CliRunner().invoke(main, ["frobnicate"])
    assert r.exit_code == 2
