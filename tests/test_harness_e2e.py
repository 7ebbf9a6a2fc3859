"""The harness inside real TensorFlow trials (tiny models, 10 steps).

Each fixture project in tests/projects/ runs once per session (module-scoped
fixtures); the fit/loop fixtures also write their own per-step losses,
computed independently of the harness, to own_losses.txt.
"""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.cli import main
from tfrepro.project import Project
from tfrepro.trials.runner import run_trial
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parent / "projects"


@pytest.fixture(autouse=True)
def _keep_variants(monkeypatch):
    monkeypatch.setenv("TFREPRO_KEEP_VARIANTS", "1")  # these tests read what the trial wrote in its copy


def own_losses(result: TrialResult) -> list[float]:
    text = (Path(result.log_dir) / "variant" / "own_losses.txt").read_text()
    return [float(x) for x in text.split()]


def assert_close(got, want, rel=1e-6):
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        if math.isnan(w):
            assert math.isnan(g)
        else:
            assert g == pytest.approx(w, rel=rel), (got, want)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`tfrepro run --json` on a copy of a fixture project, once per project."""
    done: dict[str, TrialResult] = {}

    def run(name: str) -> TrialResult:
        if name not in done:
            dest = tmp_path_factory.mktemp(name) / name
            shutil.copytree(FIXTURES / name, dest)
            res = CliRunner().invoke(main, ["run", str(dest), "--json"])
            assert res.exit_code == 0, res.output
            done[name] = TrialResult.from_dict(json.loads(res.stdout))
        return done[name]

    return run


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    """run_trial on a fixture project (state kept in a temp dir), once per arguments."""
    done: dict[tuple, TrialResult] = {}
    state = tmp_path_factory.mktemp("state")

    def run(name: str, env: dict | None = None, **kw) -> TrialResult:
        key = (name, tuple(sorted((env or {}).items())), tuple(sorted(kw)))
        if key not in done:
            p = Project.load(FIXTURES / name, detect=False)  # the fixtures as written: harness under test
            done[key] = run_trial(p, [], p.manifest.trial, TrialOptions(state_dir=state, env=env, **kw))
        return done[key]

    return run


def test_fit_per_step_losses_are_the_scripts_own(cli_run):
    r = cli_run("fit_basic")
    assert r.mode == "fit" and r.steps_run == 10 and not r.crashed
    assert r.extra["fit_loss_source"] == "exact"
    assert_close(r.losses, own_losses(r))
    assert r.weights_finite is True and r.first_nonfinite_step is None
    assert len(r.step_times) == 10 and r.median_step_time() > 0
    assert r.tf_version and r.keras_version.startswith("3.")


def test_loop_per_step_losses_are_the_scripts_own(cli_run):
    r = cli_run("loop_basic")
    assert r.mode == "loop" and r.steps_run == 10
    assert r.extra["loop_loss_source"] == "stdout"  # printed lines override the apply_gradients steps
    assert_close(r.losses, own_losses(r)[:10])
    assert r.weights_finite is True  # the loop's model was found without fit


def test_a_correct_custom_loop_matches_fit(cli_run):
    assert_close(cli_run("loop_basic").losses, cli_run("fit_basic").losses)


def test_a_nan_loss_stops_at_its_first_step(trial):
    r = trial("nan_loss")
    assert r.first_nonfinite_step == 6 and r.steps_run == 6 and r.extra["stop"] == "nonfinite"
    assert all(math.isfinite(x) for x in r.losses[:5]) and math.isnan(r.losses[5])
    assert_close(r.losses, own_losses(r))
    assert r.weights_finite is False


PROBE = """\
def install(ctx):
    def on_fit(model, args, kwargs):
        ctx.record("fit_seen", {"model": model.name, "epochs": kwargs.get("epochs")})

    def at_end(models):
        ctx.record("end_models", sorted(m.name for m in models))

    ctx.add_fit_hook(on_fit)
    ctx.add_end_hook(at_end)
"""


def test_nan_weights_behind_a_finite_loss(trial, tmp_path_factory):
    plugin = tmp_path_factory.mktemp("plugin") / "probe.py"
    plugin.write_text(textwrap.dedent(PROBE))
    r = trial("nan_weights", plugins=[plugin])
    assert all(math.isfinite(x) for x in r.losses) and r.first_nonfinite_step is None
    assert r.losses[-1] == pytest.approx(math.log(2), abs=1e-3)
    assert r.weights_finite is False and r.nonfinite
    assert [n.split("/")[-2:] for n in r.nonfinite_weights] == [["hidden", "kernel"]]
    # plugin hooks: before fit, and at the end after the step cap
    assert r.extra["fit_seen"] == {"model": "sequential", "epochs": 2}
    assert r.extra["end_models"] == ["sequential"]


def test_legacy_keras_nan_weights(trial):
    r = trial("legacy_keras", env={"TF_USE_LEGACY_KERAS": "1"})
    assert r.extra["keras"] == "tf_keras" and r.keras_version.startswith("2.")
    assert r.mode == "fit" and r.steps_run == 10 and r.extra["fit_loss_source"] == "exact"
    assert_close(r.losses, own_losses(r))
    assert r.weights_finite is False and r.nonfinite_weights == ("hidden/kernel:0",)


def test_legacy_keras_nan_loss(trial):
    r = trial("legacy_keras", env={"TF_USE_LEGACY_KERAS": "1", "SCENARIO": "nan_loss"})
    assert r.first_nonfinite_step == 6 and r.steps_run == 6
    assert_close(r.losses, own_losses(r))


def test_a_raise_after_model_build_is_a_crash(trial):
    r = trial("raises")
    assert r.crashed and r.error == "ValueError: boom" and r.exit_code == 1
    assert r.mode == "none" and r.weights_finite is True  # the built model was still checked


def test_mirrored_strategy_losses_are_the_global_batchs(trial):
    r = trial("mirrored")
    assert r.mode == "fit" and r.steps_run == 6 and not r.crashed
    assert r.extra["fit_loss_source"] == "exact"
    assert_close(r.losses, own_losses(r))


def test_a_custom_train_step_still_gives_exact_losses(trial):
    r = trial("custom_train_step")
    assert r.extra["fit_loss_source"] == "exact" and r.steps_run == 10
    assert_close(r.losses, own_losses(r))


def test_running_mean_recovery_when_no_loss_tracker_is_fed(trial):
    r = trial("custom_train_step", env={"SCENARIO": "fallback"})
    assert r.extra["fit_loss_source"] == "running_mean" and r.steps_run == 10
    assert_close(r.losses, own_losses(r), rel=1e-5)  # float32 running means: not exact


XLA_SCRIPT = """\
import numpy as np
import keras
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse", jit_compile=True)
model.fit(x, y, batch_size=16, epochs=2, verbose=0)
"""


@pytest.mark.parametrize("deterministic", [True, False])
def test_xla_dropped_by_keras_under_determinism_is_reported(tmp_path, deterministic):
    # Keras 3 turns jit_compile=True off under op determinism (which the
    # harness enables): the trial must say its XLA feature did not run.
    (tmp_path / "repro.py").write_text(XLA_SCRIPT)
    (tmp_path / "tfrepro.toml").write_text(f"[trial]\nsteps = 5\ndeterministic = {str(deterministic).lower()}\n")
    p = Project.load(tmp_path, detect=False)
    r = run_trial(p, [], p.manifest.trial)
    assert r.mode == "fit" and len(r.losses) == 5
    warned = any("jit_compile" in w for w in r.extra.get("warnings", []))
    assert warned is deterministic
