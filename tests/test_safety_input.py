"""Issue 13: bad input is refused with one message and exit 2, never a silently
disabled check or a traceback (the manifest, the entry, a shallow clone)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import GitRepo, git_env

PY = sys.executable
SCRIPT = "# tfrepro: feature a -- demo\n# A = 1\n# tfrepro: else\nA = 0\n# tfrepro: end\nprint(A)\n"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
    return subprocess.run([PY, "-m", "tfrepro", *args], capture_output=True, text=True, env=full_env, timeout=300)


def project(tmp_path: Path, manifest: str | bytes | None) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text(SCRIPT)
    if isinstance(manifest, bytes):
        (root / "tfrepro.toml").write_bytes(manifest)
    elif manifest is not None:
        (root / "tfrepro.toml").write_text(manifest)
    return root


def assert_bad_input(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("Error: ")
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.mark.parametrize(
    "table,key,value",
    [
        ("trial", "timeout_s", "nan"),
        ("trial", "timeout_s", "inf"),
        ("trial", "timeout_s", "1e300"),
        ("symptoms", "slowdown", "nan"),
        ("symptoms", "slowdown", "inf"),
        ("symptoms", "slowdown", "1e300"),
        ("symptoms", "mismatch", "nan"),
        ("symptoms", "mismatch", "+inf"),
        ("symptoms", "mismatch", "1e300"),
        ("state", "keep_runs", "-1"),
        ("state", "copy_budget_mb", "nan"),
    ],
)
def test_non_finite_or_absurd_thresholds_are_refused_naming_the_line(tmp_path, table, key, value):
    root = project(tmp_path, f"# settings\n[{table}]\n{key} = {value}\n")

    r = cli("features", str(root))

    assert_bad_input(r, f"tfrepro.toml:3: [{table}] {key}", value.lstrip("+").replace("1e300", "1e+300"))


@pytest.mark.parametrize("entry", ["../x.py", "/etc/passwd", "sub/../../x.py"])
def test_entry_outside_the_project_is_refused(tmp_path, entry):
    (tmp_path / "x.py").write_text("print('outside')\n")
    root = project(tmp_path, f'[trial]\nentry = "{entry}"\n')

    r = cli("run", str(root))

    assert_bad_input(r, "tfrepro.toml:2", "outside the project")
    assert not (root / ".tfrepro").exists()


def test_non_utf8_manifest_is_refused_with_its_line(tmp_path):
    root = project(tmp_path, b"[trial]\n# caf\xe9 settings\nsteps = 5\n")

    assert_bad_input(cli("features", str(root)), "tfrepro.toml:2", "UTF-8")


def test_a_directory_named_tfrepro_toml_is_refused(tmp_path):
    root = project(tmp_path, None)
    (root / "tfrepro.toml").mkdir()

    assert_bad_input(cli("features", str(root)), "tfrepro.toml", "is a directory")


def test_good_beyond_a_shallow_clones_boundary_says_unshallow(tmp_path):
    home = tmp_path / "home"
    origin = GitRepo.init(tmp_path / "origin", home)
    for i in range(5):
        origin.commit(f"change {i}", {"proj/repro.py": SCRIPT.replace("print(A)", f"print(A, {i})")})
    env = {**os.environ, **git_env(home)}
    subprocess.run(
        ["git", "clone", "-q", "--depth", "2", f"file://{origin.root}", str(tmp_path / "clone")], check=True, env=env
    )

    r = cli("bisect", "--good", origin.commits[0], "--bad", "HEAD", str(tmp_path / "clone" / "proj"), env=git_env(home))

    assert_bad_input(r, "shallow", "git fetch --unshallow")
