"""`annotate --write` writes through links and keeps the file's encoding
(issue 24): a symlinked or hard-linked script is annotated in its real file,
the link kept; a UTF-8 BOM or a PEP 263 `coding:` script is read as Python
reads it and written back in its own encoding."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.cli import main

SCRIPT = """\
import tensorflow as tf

tf.config.run_functions_eagerly(True)
print("ok")
"""
MARKER = "# tfrepro: feature"


def annotate_write(path: Path) -> None:
    r = CliRunner().invoke(main, ["annotate", "--write", str(path)])
    assert r.exit_code == 0, r.output


def test_a_symlinked_script_is_annotated_in_its_target_and_stays_a_link(tmp_path):
    real = tmp_path / "shared" / "train.py"
    real.parent.mkdir()
    real.write_text(SCRIPT)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").symlink_to(real)

    annotate_write(proj / "train.py")

    assert (proj / "train.py").is_symlink() and os.readlink(proj / "train.py") == str(real)
    assert MARKER in real.read_text()


def test_a_hard_linked_script_is_annotated_under_every_name(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text(SCRIPT)
    other = tmp_path / "backup_train.py"
    os.link(proj / "train.py", other)

    annotate_write(proj / "train.py")

    assert os.path.samefile(proj / "train.py", other)
    assert MARKER in other.read_text()


@pytest.mark.parametrize(
    "head, encoding",
    [(b"\xef\xbb\xbf", "utf-8"), (b"# -*- coding: latin-1 -*-\n# caf\xe9\n", "latin-1")],
    ids=["bom", "pep263-latin-1"],
)
def test_bom_and_pep263_scripts_are_annotated_in_their_own_encoding(tmp_path, head, encoding):
    script = tmp_path / "train.py"
    data = head + SCRIPT.encode()
    script.write_bytes(data)
    subprocess.run([sys.executable, "-c", f"compile(open({str(script)!r}, 'rb').read(), 't', 'exec')"], check=True)

    annotate_write(script)

    out = script.read_bytes()
    assert out.startswith(head) and MARKER.encode() in out
    compile(out, str(script), "exec")  # still Python, as Python reads it
