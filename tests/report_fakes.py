"""Fakes for the report tests: a tiny marked project (never run), a
hand-written bisect run over it, and a trial runner that judges the exported
script it is handed by what it contains (so a wrong export changes the verdict).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tfrepro.report.bundle import ReportOptions, build_report
from tfrepro.settings import TrialSettings
from tfrepro.trials.values import TrialResult

PROJECT_SRC = '''"""Tiny marked project (never run by these tests)."""
import numpy as np
import tensorflow as tf
import keras

# tfrepro: feature mixed_precision -- float16 compute
# keras.mixed_precision.set_global_policy("mixed_float16")
# tfrepro: end

# tfrepro: feature lr_warmup -- warm the learning rate up
# lr = keras.optimizers.schedules.PolynomialDecay(1e-4, 10, 1e-2)
# tfrepro: else
lr = 1e-2
# tfrepro: end

# tfrepro: feature custom_loop -- hand-written training step
# MODE = "loop"
# tfrepro: else
MODE = "fit"
# tfrepro: end

# tfrepro: feature bad_reshape -- reshape the batch (wrongly)
# BATCH_SHAPE = (3, 7)
# tfrepro: end

# tfrepro: feature slow_callback -- a callback sleeping each batch
# SLEEP = 0.05
# tfrepro: else
SLEEP = 0.0
# tfrepro: end
print(MODE, lr, SLEEP)
'''


def make_project(tmp_path: Path) -> Path:
    """The project, in a fake home directory (~/proj)."""
    root = tmp_path / "home" / "alice" / "proj"
    root.mkdir(parents=True)
    (root / "repro.py").write_text(PROJECT_SRC)
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 8\n\n[features.lr_warmup]\naffects_loss = true\n")
    return root


def trial(enabled=(), losses=(1.0, 0.8, 0.6, 0.5, 0.45, 0.4), step=0.01, **kw) -> dict:
    n = len(losses)
    return TrialResult(
        enabled=tuple(enabled),
        losses=tuple(losses),
        step_times=(0.5,) + (step,) * (n - 1),
        steps_run=n,
        weights_finite=True,
        mode="fit",
        **kw,
    ).to_dict()


def make_run(
    project: Path,
    symptom: str,
    culprits: list[str],
    culprit_config: list[str] | None = None,
    run_id: str = "20261129-120000",
    **extra,
) -> Path:
    run = project / ".tfrepro" / "runs" / run_id
    (run / "trials").mkdir(parents=True)
    culprit_config = culprit_config or culprits
    crash = trial(
        culprit_config,
        losses=(),
        crashed=True,
        exit_code=1,
        error="ValueError: cannot reshape array of size 32 into shape (3,7)",
        extra={
            "error_detail": 'Traceback (most recent call last):\n  File "repro.py", line 30\n'
            "ValueError: cannot reshape array of size 32 into shape (3,7)"
        },
    )
    bad = {
        "crash": crash,
        "nan": trial(culprit_config, losses=(1.0, math.nan), first_nonfinite_step=2),
        "mismatch": trial(culprit_config, losses=(1.0, 0.9, 0.85, 0.8, 0.78, 0.77)),
        "slowdown": trial(culprit_config, step=0.06),
    }[symptom]
    base = trial()
    table = []
    for i, (s, v) in enumerate([(base, "ok"), (bad, symptom)]):
        (run / "trials" / f"{i}.json").write_text(json.dumps(s))
        table.append({"enabled": s["enabled"], "verdict": v, "summary": f"trials/{i}.json", "cached": False})
    result = {
        "status": "found",
        "symptom": symptom,
        "culprits": culprits,
        "baseline": base,
        "trials": 2,
        "wall_s": 3.5,
        "run_dir": str(run),
        "first_bad_commit": None,
        "project": str(project),
        "settings": TrialSettings(steps=8).to_dict(),
        "features": ["bad_reshape", "custom_loop", "lr_warmup", "mixed_precision", "slow_callback"],
        "affects_loss": ["lr_warmup"],
        "failing": bad,
        "culprit_trial": bad,
        "culprit_config": culprit_config,
        "ablation": {c: "ok" for c in culprits},
        "trials_table": table,
        "flaky": False,
        "reproduction_rate": 1.0,
        "noise": 0.0,
        "timing": None,
        "version": 1,
        **extra,
    }
    (run / "result.json").write_text(json.dumps(result))
    return run


class ScriptedRunner:
    """Judges the exported script it is handed by what it contains."""

    def __init__(
        self, healthy: bool = False, crash_error: str = "ValueError: cannot reshape array of size 32 into shape (3,7)"
    ) -> None:
        self.calls: list[str] = []
        self.healthy = healthy
        self.crash_error = crash_error

    def __call__(self, project_dir: Path, settings: TrialSettings) -> TrialResult:
        src = (project_dir / settings.entry).read_text()
        assert "tfrepro:" not in src, "the re-run must get the exported file, markers removed"
        self.calls.append(src)
        live = [line for line in src.splitlines() if not line.lstrip().startswith("#")]
        has = lambda s: any(s in line for line in live)
        if self.healthy:
            return TrialResult.from_dict(trial())
        if has("BATCH_SHAPE = (3, 7)"):
            return TrialResult(crashed=True, exit_code=1, error=self.crash_error)
        if has("mixed_float16"):
            return TrialResult.from_dict(trial(losses=(1.0, math.nan), first_nonfinite_step=2))
        if has('MODE = "loop"'):
            return TrialResult.from_dict(trial(losses=(1.0, 0.9, 0.85, 0.8, 0.78, 0.77)))
        if has("SLEEP = 0.05"):
            return TrialResult.from_dict(
                trial(losses=(1.0, 0.8, 0.6, 0.5, 0.45, 0.4), step=0.06 + 0.001 * len(self.calls))
            )
        return TrialResult.from_dict(trial(step=0.01 + 0.001 * len(self.calls)))


def build(run: Path, runner, environ=None, out=None, **how):
    env = {"HOME": str(run.parents[3]), **(environ or {})}  # the project sits in ~/proj
    how = ReportOptions(**{"localize": False, "probe_environment": False, **how})
    return build_report(run, how, out=out, runner=runner, environ=env)
