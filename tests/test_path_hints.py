"""Issue 24: a project's directory symlink (`data -> /mnt/...`) or a
`../shared_data` read fails in the trial's copy; the crash says why, with
the fix, and loading the project warns about the symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tfrepro.trials.runner import missing_path_hint

PY = sys.executable


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([PY, "-m", "tfrepro", *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_read_through_a_directory_symlink_gets_a_hint_naming_the_link(tmp_path):
    mnt = tmp_path / "mnt" / "data"
    mnt.mkdir(parents=True)
    (mnt / "x.csv").write_text("1,2\n")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "data").symlink_to(mnt)
    (root / "repro.py").write_text("open('data/x.csv').read()\nprint('step=1 loss=0.5')\n")

    r = cli("run", str(root), "--json", "--steps", "1")

    doc = json.loads(r.stdout)
    assert doc["crashed"] and "data is a symlink to the directory" in doc["error"], doc["error"]
    assert str(mnt) in doc["error"]
    assert "data: a symlink to the directory" in r.stderr
    assert (mnt / "x.csv").read_text() == "1,2\n"


def test_a_read_out_of_the_project_gets_a_hint_with_the_absolute_path(tmp_path):
    shared = tmp_path / "shared_data"
    shared.mkdir()
    (shared / "x.csv").write_text("1,2\n")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text("open('../shared_data/x.csv').read()\nprint('step=1 loss=0.5')\n")

    r = cli("run", str(root), "--json", "--steps", "1")

    doc = json.loads(r.stdout)
    assert doc["crashed"] and "outside the project directory" in doc["error"], doc["error"]
    assert str(shared / "x.csv") in doc["error"]


def test_tf_io_not_found_and_unrelated_errors(tmp_path):
    assert "outside the project" in missing_path_hint(
        "NotFoundError: ../d/x.tfrecord; No such file or directory", tmp_path
    )
    assert missing_path_hint("FileNotFoundError: [Errno 2] No such file or directory: 'gone.csv'", tmp_path) is None
    assert missing_path_hint("ValueError: bad shape", tmp_path) is None
    assert missing_path_hint(None, tmp_path) is None


def test_a_crash_in_a_project_holding_a_git_lfs_pointer_says_so(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "data.bin").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 31000000\n"
    )
    (root / "repro.py").write_text("assert len(open('data.bin', 'rb').read()) == 31000000\nprint('step=1 loss=0.5')\n")

    r = cli("run", str(root), "--json", "--steps", "1")

    doc = json.loads(r.stdout)
    assert doc["crashed"] and "data.bin is a git-lfs pointer file" in doc["error"], doc["error"]
