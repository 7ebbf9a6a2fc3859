"""Memory in real trial processes: an out-of-memory death is `memory`, not
`crash` (a low RLIMIT_AS set by `[trial] memory_limit_mb`; a SIGKILL as the
kernel's OOM killer sends it), and the harness records RSS per step."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tfrepro.project import Project
from tfrepro.settings import SymptomSettings
from tfrepro.trials.classify import primary, symptoms
from tfrepro.trials.runner import run_trial
from tfrepro.trials.trial import TrialOptions
from tfrepro.verdicts import Verdict

pytestmark = pytest.mark.e2e


def _project(root: Path, script: str, toml: str = "") -> Project:
    root.mkdir(parents=True, exist_ok=True)
    (root / "repro.py").write_text(textwrap.dedent(script), encoding="utf-8")
    (root / "tfrepro.toml").write_text('[trial]\nentry = "repro.py"\ntimeout_s = 120\n' + toml, encoding="utf-8")
    return Project.load(root, detect=False)


def test_tensorflow_oom_under_a_low_address_space_limit_is_memory(tmp_path):
    project = _project(
        tmp_path / "p",
        """\
        import tensorflow as tf
        print("step=1 loss=1.0")
        x = tf.ones([2**30], tf.float32)  # 4 GB, over the 3000 MB limit
        print("step=2 loss=", float(tf.reduce_sum(x)))
        """,
        "memory_limit_mb = 3000\n",
    )
    assert project.manifest.trial.memory_limit_mb == 3000
    result = run_trial(project, (), project.manifest.trial, TrialOptions(use_cache=False))
    assert result.crashed and "ResourceExhaustedError" in (result.error or "")
    assert result.peak_rss_bytes and result.steps_run == 1
    assert primary(symptoms(result, reference=None, settings=SymptomSettings())) == Verdict.MEMORY


def test_a_numpy_memory_error_and_an_oom_kill_are_memory(tmp_path):
    numpy_oom = _project(
        tmp_path / "np",
        """\
        import numpy as np
        print("step=1 loss=1.0")
        a = np.ones(2**31, dtype=np.float64)  # 16 GB, over the 512 MB limit
        """,
        "memory_limit_mb = 512\n",
    )
    killed = _project(
        tmp_path / "kill",
        """\
        import os, signal
        print("step=1 loss=1.0", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer sends
        """,
    )
    for project, what in ((numpy_oom, "MemoryError"), (killed, "SIGKILL")):
        result = run_trial(project, (), project.manifest.trial, TrialOptions(use_cache=False))
        assert result.crashed and not result.timed_out
        assert what in (result.error or ""), result.error
        assert primary(symptoms(result, reference=None, settings=SymptomSettings())) == Verdict.MEMORY


def test_a_loop_trial_records_rss_per_step_and_sees_a_leak(tmp_path):
    script = """\
        keep = []
        for step in range(1, 31):
            # tfrepro: feature leak -- keep 4 MB per step
            # keep.append(bytearray(4 * 1024 * 1024))
            # tfrepro: end
            print(f"step={step} loss=1.0")
        """
    project = _project(tmp_path / "loop", script, "steps = 30\n")
    base = [run_trial(project, (), project.manifest.trial, TrialOptions(use_cache=False)) for _ in range(2)]
    leak = run_trial(project, ("leak",), project.manifest.trial, TrialOptions(use_cache=False))
    assert len(leak.rss_per_step) == 30 and leak.peak_rss_bytes >= max(leak.rss_per_step)
    assert leak.growth_per_step == pytest.approx(4 * 1024 * 1024, rel=0.1)
    assert primary(symptoms(leak, reference=None, settings=SymptomSettings(), baselines=base)) == Verdict.MEMORY
    assert primary(symptoms(base[1], reference=None, settings=SymptomSettings(), baselines=base)) == Verdict.OK
