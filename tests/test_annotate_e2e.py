"""End to end: annotate realistic training scripts and run them for real.

For each script in tests/scripts_annotate/: the annotated copy (written by the
CLI, every feature ON) must produce exactly the per-step losses of the
original under the trial harness's determinism, and the expected features
must be found.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.cli import main

SCRIPTS = Path(__file__).parent / "scripts_annotate"
STEPS = 5

EXPECTED = {
    "keras_fit_callbacks.py": {
        "shuffle",
        "prefetch",
        "callback_early_stopping",
        "callback_model_checkpoint",
        "callback_warmup_scheduler",
        "callback_loss_history",
        "callback_csv_logger",
    },
    "custom_loop_mirrored.py": {
        "memory_growth",
        "shuffle",
        "prefetch",
        "eager_debug",
        "mirrored_strategy",
        "lr_schedule",
        "tf_function",
        "custom_layer_residual_block",
    },
    "tfdata_files_interleave.py": {
        "interleave",
        "parallel_map",
        "cache",
        "shuffle",
        "prefetch",
        "jit_compile",
        "callback_terminate_on_nan",
    },
    "mixed_precision_custom_layer.py": {
        "mixed_precision",
        "prefetch",
        "custom_layer_scaled_dense",
        "custom_layer_rms_norm",
    },
    "tf_keras_names.py": {
        "custom_layer_linear",
        "shuffle",
        "lr_schedule",
        "callback_print_every",
        "callback_reduce_lr_on_plateau",
    },
}


def annotated_copy(script: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    target = dest / script
    shutil.copy(SCRIPTS / script, target)
    result = CliRunner().invoke(main, ["annotate", "--write", str(target)])
    assert result.exit_code == 0, result.output
    return target


def original_copy(script: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    shutil.copy(SCRIPTS / script, dest / script)
    return dest / script


@pytest.mark.e2e
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_annotated_script_trains_exactly_like_the_original(script: str, tmp_path: Path) -> None:
    from tfrepro.project import Project
    from tfrepro.settings import TrialSettings
    from tfrepro.trials.runner import run_trial
    from tfrepro.trials.trial import TrialOptions

    original = original_copy(script, tmp_path / "original")
    annotated = annotated_copy(script, tmp_path / "annotated")
    ann = Project.load(annotated)
    assert set(ann.feature_names) == EXPECTED[script]
    assert all(ann.states_in_files()[n] for n in ann.feature_names)  # written ON

    settings = TrialSettings(entry=script, steps=STEPS, timeout_s=240)
    env = {"TRAIN_STEPS": str(STEPS)}
    before = run_trial(Project.load(original, detect=False), (), settings, TrialOptions(use_cache=False, env=env))
    after = run_trial(ann, ann.feature_names, settings, TrialOptions(use_cache=False, env=env))
    for r in (before, after):
        assert not r.crashed, r.error
        assert len(r.losses) == STEPS
    assert after.losses == before.losses


@pytest.mark.e2e
def test_bisect_on_an_annotated_script_names_the_planted_feature(tmp_path: Path, monkeypatch) -> None:
    """The promise of annotate: two commands from an unmarked script to the
    culprit. The planted bug: the warm-up callback ramps the learning rate
    to 1e4 instead of 1e-3, so training goes NaN within a few steps."""
    import json

    script = tmp_path / "train.py"
    text = (SCRIPTS / "keras_fit_callbacks.py").read_text()
    planted = text.replace("WARMUP_TARGET_LR = 1e-3\n", "WARMUP_TARGET_LR = 1e4\n")
    assert planted != text
    script.write_text(planted)
    runner = CliRunner()
    assert runner.invoke(main, ["annotate", "--write", str(script)]).exit_code == 0
    monkeypatch.setenv("TRAIN_STEPS", "6")  # the script's own knob: 2 epochs of 6 steps
    if "bisect" in main.commands:
        result = runner.invoke(main, ["bisect", "--json", str(tmp_path)])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
    else:  # the command is not wired yet: the engine it will call
        from tfrepro.bisect.engine import BisectOptions, bisect
        from tfrepro.project import Project

        out = bisect(Project.load(tmp_path), BisectOptions(replays=1)).to_dict()
    assert out["status"] == "found" and out["symptom"] == "nan"
    assert out["culprits"] == ["callback_warmup_scheduler"]
