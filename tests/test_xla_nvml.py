"""XLA under "auto" (the harness's warning, annotate's XLA_FLAGS feature) and
the GPU-utilisation evidence of `check` (fake NVML samples)."""

from __future__ import annotations

from types import SimpleNamespace

from tfrepro.check.checklist import CheckStatus
from tfrepro.check.judge import judge
from tfrepro.inside import harness_keras
from tfrepro.trials.values import TrialResult


def _tf(devices: list[str]):
    listed = [SimpleNamespace(device_type=d) for d in devices]
    return SimpleNamespace(config=SimpleNamespace(list_physical_devices=lambda *a: listed))


def _model(jit=False, layers_jit=True, strategy=None):
    layer = SimpleNamespace(supports_jit=layers_jit)
    return SimpleNamespace(jit_compile=jit, _distribute_strategy=strategy, _flatten_layers=lambda: [layer])


def test_auto_jit_warns_only_where_auto_would_have_meant_xla():
    gpu, cpu = _tf(["CPU", "GPU"]), _tf(["CPU"])
    dropped = harness_keras.auto_jit_dropped
    assert dropped(_model(), {}, gpu, True)  # default "auto", a GPU, determinism on
    assert dropped(_model(), {"jit_compile": "auto"}, gpu, True)
    assert not dropped(_model(), {}, cpu, True)  # CPU only: "auto" is no XLA anyway
    assert not dropped(_model(), {}, gpu, False)  # determinism off: XLA stays
    assert not dropped(_model(jit=True), {}, gpu, True)  # XLA on after all
    assert not dropped(_model(), {"jit_compile": False}, gpu, True)
    assert not dropped(_model(), {"jit_compile": True}, gpu, True)  # the other warning's case
    assert not dropped(_model(), {"run_eagerly": True}, gpu, True)
    assert not dropped(_model(strategy=object()), {}, gpu, True)  # Keras: no XLA under tf.distribute
    assert not dropped(_model(layers_jit=False), {}, gpu, True)
    assert not dropped(_model(), {}, None, True)
    assert "auto" in harness_keras.AUTO_JIT_DROPPED


def test_annotate_marks_xla_flags_assignments(tmp_path):
    from tfrepro.project import Project

    (tmp_path / "train.py").write_text(
        "import os\nos.environ['XLA_FLAGS'] = '--xla_gpu_autotune_level=0'\n"
        "os.environ['TF_XLA_FLAGS'] = '--tf_xla_auto_jit=2'\nos.environ['OTHER'] = '1'\n"
        "for s in range(1, 3):\n    print(f'step={s} loss=1.0')\n"
    )
    (tmp_path / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\n')
    project = Project.load(tmp_path)
    assert "xla_flags" in project.feature_names
    off = project.render(set())["train.py"]
    assert "# os.environ['XLA_FLAGS']" in off and "\nos.environ['OTHER'] = '1'" in off


def _trial(util: list[int], steps: list[float], compute: float | None) -> TrialResult:
    timing = {"pipeline_s": 0.001, "compute_s": compute, "pipeline_batches": 10}
    return TrialResult(
        losses=(1.0,) * len(steps),
        step_times=tuple(steps),
        steps_run=len(steps),
        mode="fit",
        extra={"nvml": {"gpu_util": util}, "check.timing": timing},
    )


def _pipeline(result: TrialResult):
    return next(i for i in judge(result).items if i.key == "input_pipeline")


def test_an_idle_gpu_with_slow_steps_is_input_bound():
    item = _pipeline(_trial([90, 20, 15, 18, 22, 19, 17, 21, 16, 20], [0.5] + [0.02] * 20, compute=0.005))
    assert item.status == CheckStatus.WARN and "GPU is busy 18%" in item.summary
    assert any("NVML" in e for e in item.evidence)


def test_a_busy_gpu_is_not_flagged_and_no_samples_change_nothing():
    busy = _pipeline(_trial([95] * 10, [0.5] + [0.006] * 20, compute=0.005))
    assert busy.status == CheckStatus.PASS and any("median 95%" in e for e in busy.evidence)
    fast = _pipeline(_trial([30] * 10, [0.5] + [0.005] * 20, compute=0.005))  # idle but steps as fast as the model
    assert fast.status == CheckStatus.PASS
    none = _pipeline(_trial([], [0.5] + [0.006] * 20, compute=0.005))
    assert not any("NVML" in e for e in none.evidence)
