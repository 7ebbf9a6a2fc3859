"""One project root for every mode and command (issue 23): a script below a
git repository's root is the repository's project, whether it is bisected
by features, by commits, annotated or cleaned."""

from __future__ import annotations

import subprocess
from pathlib import Path

from click.testing import CliRunner

from tfrepro.annotate import annotate
from tfrepro.bisect import commits
from tfrepro.bisect.events import BisectOptions
from tfrepro.cli import main
from tfrepro.project import locate
from tfrepro.trials.state import StateDir, clean_project


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 7\n")
    (root / "sub" / "train.py").write_text(
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\nprint('step=1 loss=1.0')\n"
    )
    return root


def test_feature_and_commit_modes_take_one_root_one_manifest_one_state_dir(tmp_path, monkeypatch):
    root = _repo(tmp_path)
    monkeypatch.chdir(root)
    feature_root, feature_entry = locate("sub/train.py")
    commit_root, commit_entry = locate("sub/train.py")
    assert (feature_root, feature_entry) == (commit_root, commit_entry) == (root.resolve(), "sub/train.py")
    settings, _ = commits.range_settings(commit_root, commit_entry, BisectOptions())
    assert settings.steps == 7 and settings.entry == "sub/train.py"  # the top-level tfrepro.toml
    assert StateDir.of(feature_root).path == StateDir.of(commit_root).path == root.resolve() / ".tfrepro"


def test_annotate_writes_the_manifest_bisect_reads(tmp_path, monkeypatch):
    root = _repo(tmp_path)
    (root / "tfrepro.toml").unlink()
    monkeypatch.chdir(root)
    ann = annotate(["sub/train.py"])
    assert ann.manifest is not None  # the detected mixed_precision is not the default entry
    assert ann.manifest.path.parent == locate("sub/train.py")[0] == root.resolve()


def test_clean_finds_the_project_and_reads_its_manifest_as_bisect_does(tmp_path, monkeypatch):
    """`tfrepro clean` takes the root `locate` gives (a script: its project;
    a path that does not exist: bad input, exit 2) and the manifest as
    `read_manifest` reads it (a tfrepro.toml that is not UTF-8: exit 2)."""
    root = _repo(tmp_path)
    monkeypatch.chdir(root)
    made = StateDir.of(root)
    made.ensure()
    assert clean_project("sub/train.py", everything=True) is not None
    assert not made.path.exists() and not (root / "sub" / ".tfrepro").exists()
    r = CliRunner().invoke(main, ["clean", "no-such-dir"])
    assert r.exit_code == 2 and "no such file or directory" in r.output
    (root / "tfrepro.toml").write_bytes(b"[state]\nkeep_runs = 3  # \xff\n")
    r = CliRunner().invoke(main, ["clean", "sub/train.py"])
    assert r.exit_code == 2 and "not UTF-8" in r.output
