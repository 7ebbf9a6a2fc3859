"""Generated projects run with real TensorFlow (a sample of the matrix; the
whole template x feature matrix is scripts/template_matrix.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfrepro.project import Project
from tfrepro.scaffold.generate import new_project

pytestmark = pytest.mark.e2e

CATALOG = (
    "mixed_precision,mirrored_strategy,xla,eager_debugging,prefetch,parallel_map,cache,shuffle,interleave,"
    "callbacks,custom_loop,custom_layer,lr_warmup,gradient_accumulation,sync_batchnorm"
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("TFREPRO_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "T")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "t@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "T")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "t@example.com")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


def _run(cwd: Path, *args: str, steps: int | None = None, tmp: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    if steps is not None:
        env["REPRO_STEPS"] = str(steps)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _epoch_losses(stdout: str) -> list[float]:
    line = [x for x in stdout.splitlines() if x.startswith("loss per epoch:")][-1]
    return [float(x) for x in line.split(":", 1)[1].strip(" []").split(",")]


def test_defaults_project_passes_its_own_test(tmp_path):
    dest = tmp_path / "repro"
    new_project(dest, defaults=True)  # what `tfrepro new --defaults` makes
    proc = _run(dest, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout


@pytest.mark.parametrize("template", ["image", "tabular", "sequence"])
def test_every_feature_on_together_still_trains(tmp_path, template):
    dest = tmp_path / template
    new_project(dest, template=template, data={"features": CATALOG})
    project = Project.load(dest)
    project.write_variant(set(project.feature_names), tmp_path / "all_on")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = _run(tmp_path / "all_on", "repro.py", steps=2, tmp=scratch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(scratch.glob("repro_callbacks_*")), "the callbacks' output dir outlived the run"
    losses = _epoch_losses(proc.stdout)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), losses
    steps = [x for x in proc.stdout.splitlines() if x.startswith("step=")]
    assert [s.split()[0] for s in steps] == ["step=1", "step=2"]


def test_custom_loop_matches_fit(tmp_path):
    """Same init, same batches, same loss reduction: the epoch losses of the
    GradientTape loop equal fit's (deterministic ops, CPU)."""
    dest = tmp_path / "p"
    new_project(dest, template="tabular", data={"features": "custom_loop"})
    project = Project.load(dest)
    project.write_variant(set(), tmp_path / "fit")
    project.write_variant({"custom_loop"}, tmp_path / "loop")
    fit = _run(tmp_path / "fit", "repro.py", steps=6)
    loop = _run(tmp_path / "loop", "repro.py", steps=6)
    assert fit.returncode == 0 and loop.returncode == 0, (fit.stderr[-2000:], loop.stderr[-2000:])
    assert "step=" not in fit.stdout and "step=6 loss=" in loop.stdout
    assert _epoch_losses(loop.stdout) == pytest.approx(_epoch_losses(fit.stdout), rel=1e-4)
