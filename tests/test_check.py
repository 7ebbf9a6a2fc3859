"""`tfrepro check`'s judging, on recorded probe data (pure, milliseconds).

The records below have the shape the probe plugin writes into
`TrialResult.extra`; the e2e tests (test_check_e2e.py) produce real ones.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tfrepro.check.judge import CheckItem, CheckOptions, CheckReport, CheckStatus, format_report, judge, num_classes
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult

PROBES = Path(__file__).resolve().parents[1] / "tfrepro" / "inside" / "probes.py"
TOOLS = PROBES.with_name("probe_tools.py")


def _probes():
    """The probes' helper module, loaded by path as the plugin loads it."""
    spec = importlib.util.spec_from_file_location("_probe_tools_under_test", TOOLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tstats(name, shape, dtype="float32", **kw):
    d = {
        "name": name,
        "shape": list(shape),
        "dtype": dtype,
        "size": int(np.prod(shape)),
        "kind": "int" if dtype.startswith("int") else "float",
    }
    d.update(kw)
    return d


X_OK = tstats("inputs", (64, 32), min=-3.4, max=3.8, mean=0.0, std=1.0, nan=0, inf=0, integral=False)
Y_OK = tstats("labels", (64,), "int32", min=0, max=9, mean=4.7, std=2.6, integral=True)

CLEAN = {
    "check.env": {
        "python": "3.11.7",
        "platform": "Linux",
        "tensorflow": "2.21.0",
        "keras": "3.15.1",
        "build": {"is_cuda_build": True, "cuda_version": "12.5.1"},
        "physical_devices": {"CPU": 1},
        "gpu_names": [],
        "logical_devices": {"CPU": 1},
        "tf_env": {},
        "gpu_expected": False,
        "gpu_expected_why": None,
    },
    "check.loss": {"name": "SparseCategoricalCrossentropy", "kind": "sparse", "from_logits": True, "source": "compile"},
    "check.batches": {
        "source": "fit (tf.data)",
        "batches": [{"inputs": [X_OK], "labels": [Y_OK]}, {"inputs": [X_OK], "labels": [Y_OK]}],
    },
    "check.model": {
        "name": "sequential",
        "class": "Sequential",
        "trainable": 11018,
        "non_trainable": 0,
        "output_width": 10,
        "last_activation": "linear",
        "first_layer_input": None,
    },
    "check.timing": {"pipeline_s": 0.0001, "compute_s": 0.0004, "pipeline_batches": 120},
}
FALLING = tuple(2.4 - 0.04 * i for i in range(30))


def result(extra=None, *, losses=FALLING, step_time=0.001, **kw) -> TrialResult:
    extra = copy.deepcopy(CLEAN if extra is None else extra)
    fields = dict(
        losses=tuple(losses),
        step_times=tuple([step_time] * len(losses)),
        mode="fit",
        steps_run=len(losses),
        weights_finite=True,
        extra=extra,
    )
    fields.update(kw)
    return TrialResult(**fields)


def with_(**changes):
    """CLEAN with some records replaced (None removes the record)."""
    extra = copy.deepcopy(CLEAN)
    for key, value in changes.items():
        key = "check." + key
        if value is None:
            extra.pop(key, None)
        else:
            extra[key] = value
    return extra


def batches(x=X_OK, y=Y_OK):
    return {"source": "fit (tf.data)", "batches": [{"inputs": [x], "labels": [y] if y else []}] * 2}


def statuses(report: CheckReport) -> dict[str, str]:
    return {i.key: i.status.value for i in report.items}


# -- the checklist as a whole ------------------------------------------------------------


def test_clean_record_passes_every_check():
    report = judge(result())
    assert statuses(report) == dict.fromkeys(
        ["environment", "input_pipeline", "first_batches", "initial_loss", "short_run", "parameters"], "pass"
    )
    assert report.ok and report.to_dict()["flagged"] == []
    assert [i.number for i in report.items] == [1, 2, 3, 4, 5, 6]


def test_report_round_trips_through_json():
    report = judge(
        result(with_(batches=batches(y=tstats("labels", (64,), "int32", min=1, max=10, mean=5, std=3, integral=True))))
    )
    doc = json.loads(json.dumps(report.to_dict()))  # every field of every item, as JSON gives it back
    again = [
        CheckItem(**{**c, "status": CheckStatus(c["status"]), "evidence": tuple(c["evidence"])}) for c in doc["checks"]
    ]
    assert tuple(again) == report.items
    assert doc["status"] == "fail"


def test_text_names_the_failed_check_with_evidence_and_fix():
    y = tstats("labels", (64,), "int32", min=1, max=10, mean=5, std=3, integral=True)
    text = format_report(judge(result(with_(batches=batches(y=y))), project="proj"))
    line = next(ln for ln in text.splitlines() if ln.startswith("3. "))
    assert "FAIL" in line and "outside [0, 10)" in line
    assert "fix: labels must be class ids in [0, C)" in text
    assert text.splitlines()[-1] == "5 pass, 0 warn, 1 fail, 0 skipped"
    # Passing checks show their evidence only on request.
    assert "physical devices" not in text
    assert "physical devices" in format_report(judge(result()), verbose=True)


# -- 3. first batches -----------------------------------------------------------------------


def test_labels_out_of_range_fail_only_the_batch_check():
    y = tstats("labels", (64,), "int32", min=1, max=10, mean=5, std=3, integral=True)
    report = judge(result(with_(batches=batches(y=y))))
    assert report.to_dict()["flagged"] == ["first_batches"]
    assert report.item("first_batches").status is CheckStatus.FAIL
    assert "class ids in [1, 10], outside [0, 10) for a 10-way output" in report.item("first_batches").summary


def test_negative_label_is_out_of_range():
    y = tstats("labels", (64,), "int32", min=-1, max=9, mean=5, std=3, integral=True)
    assert judge(result(with_(batches=batches(y=y)))).item("first_batches").status is CheckStatus.FAIL


def test_one_hot_rows_of_zeros_are_flagged_for_categorical_loss():
    y = tstats(
        "labels",
        (64, 10),
        min=0,
        max=1,
        mean=0.09,
        std=0.29,
        nan=0,
        inf=0,
        integral=True,
        row_sum_min=0.0,
        row_sum_max=1.0,
    )
    loss = {"name": "categorical_crossentropy", "kind": "categorical", "from_logits": True, "source": "compile"}
    item = judge(result(with_(batches=batches(y=y), loss=loss))).item("first_batches")
    assert item.status is CheckStatus.FAIL and "one-hot rows summing to 0..1" in item.summary


def test_binary_labels_must_lie_in_unit_interval():
    y = tstats("labels", (64, 1), min=0, max=2, mean=0.7, std=0.6, nan=0, inf=0, integral=True)
    loss = {"name": "BinaryCrossentropy", "kind": "binary", "from_logits": True, "source": "compile"}
    model = dict(CLEAN["check.model"], output_width=1)
    item = judge(result(with_(batches=batches(y=y), loss=loss, model=model))).item("first_batches")
    assert item.status is CheckStatus.FAIL and "outside [0, 1]" in item.summary


def test_labels_not_judged_for_regression_and_says_why():
    loss = {"name": "MeanSquaredError", "kind": "other", "from_logits": None, "source": "compile"}
    y = tstats("labels", (64,), min=-50, max=50, mean=0, std=20, nan=0, inf=0, integral=False)
    report = judge(result(with_(batches=batches(y=y), loss=loss)))
    assert report.item("first_batches").status is CheckStatus.PASS
    assert (
        "labels not judged: the loss MeanSquaredError is not a classification loss"
        in report.item("first_batches").evidence
    )
    assert report.item("initial_loss").status is CheckStatus.SKIP
    assert "not a classification loss" in report.item("initial_loss").summary


def test_nan_inputs_fail_the_batch_check_and_block_the_loss_checks():
    x = dict(X_OK, nan=3)
    losses = (float("nan"),)
    report = judge(
        result(
            with_(batches=batches(x=x)),
            losses=losses,
            first_nonfinite_step=1,
            weights_finite=False,
            nonfinite_weights=("dense/kernel",),
        )
    )
    assert report.to_dict()["flagged"] == ["first_batches"]
    assert "3 NaN and 0 Inf among 2048 values" in report.item("first_batches").summary
    for key in ("initial_loss", "short_run"):
        item = report.item(key)
        assert item.status is CheckStatus.SKIP
        assert item.summary.startswith("not judged: the first batches are flagged (check 3); observed: ")
    assert "nan" in report.item("initial_loss").summary


def test_nan_loss_without_bad_inputs_fails_the_loss_checks():
    report = judge(result(losses=(2.3, 2.2, float("nan")), first_nonfinite_step=3))
    assert report.item("short_run").status is CheckStatus.FAIL
    assert "became nan at step 3" in report.item("short_run").summary


def test_unnormalised_inputs_warn_and_block_a_bad_initial_loss():
    x = tstats("inputs", (64, 32), min=0, max=255, mean=127.4, std=73.9, nan=0, inf=0, integral=True)
    report = judge(result(with_(batches=batches(x=x)), losses=(82.0, 61.0, 86.0, 40.0, 30.0)))
    assert report.to_dict()["flagged"] == ["first_batches"]
    item = report.item("first_batches")
    assert item.status is CheckStatus.WARN and "far from normalised: mean 127.4" in item.summary
    assert "keras.layers.Normalization()" in item.fix
    assert report.item("initial_loss").status is CheckStatus.SKIP
    assert "initial loss 82 is far above chance 2.303" in report.item("initial_loss").summary


def test_normalising_layer_in_the_model_excuses_raw_inputs():
    x = tstats("inputs", (64, 32), min=0, max=255, mean=127.4, std=73.9, nan=0, inf=0)
    model = dict(
        CLEAN["check.model"], first_layer_input={"layer": "rescaling", "normalised_by": "Rescaling", "via": []}
    )
    report = judge(result(with_(batches=batches(x=x), model=model)))
    assert report.item("first_batches").status is CheckStatus.PASS


def test_weightless_standardiser_judged_by_what_the_first_weighted_layer_sees():
    x = tstats("inputs", (32, 16), min=300, max=700, mean=500, std=115, nan=0, inf=0)
    seen = tstats("", (32, 16), min=-1.9, max=1.8, mean=0.0, std=1.0, nan=0, inf=0)
    model = dict(CLEAN["check.model"], first_layer_input={"layer": "dense", "via": ["standardize"], "stats": seen})
    assert judge(result(with_(batches=batches(x=x), model=model))).item("first_batches").status is CheckStatus.PASS
    far = dict(seen, mean=480.0, std=100.0, min=280, max=690)
    model["first_layer_input"]["stats"] = far
    item = judge(result(with_(batches=batches(x=x), model=model))).item("first_batches")
    assert item.status is CheckStatus.WARN and "what dense receives far from normalised" in item.summary


def test_integer_inputs_are_not_judged_for_scale():
    x = tstats("inputs", (64, 20), "int64", min=0, max=9999, mean=4000, std=2800, integral=True)
    assert judge(result(with_(batches=batches(x=x)))).item("first_batches").status is CheckStatus.PASS


def test_no_batch_seen_is_a_skip_with_the_reason():
    extra = with_(batches=None)
    extra["check.skips"] = {"batches": "fit was given a PyDataset; only tf.data datasets and arrays are inspected"}
    item = judge(result(extra)).item("first_batches")
    assert item.status is CheckStatus.SKIP and "PyDataset" in item.summary


# -- 2. input pipeline -------------------------------------------------------------------------


def test_slow_pipeline_is_input_bound_with_both_numbers():
    timing = {"pipeline_s": 0.036, "compute_s": 0.00035, "pipeline_batches": 27}
    report = judge(result(with_(timing=timing), step_time=0.04))
    assert report.to_dict()["flagged"] == ["input_pipeline"]
    item = report.item("input_pipeline")
    assert item.status is CheckStatus.WARN
    assert "36 ms per batch" in item.summary and "0.35 ms per step" in item.summary
    assert "num_parallel_calls=tf.data.AUTOTUNE" in item.fix and "prefetch" in item.fix


def test_pipeline_slower_than_a_tiny_model_but_small_share_of_the_step_passes():
    timing = {"pipeline_s": 0.0005, "compute_s": 0.0003}
    assert judge(result(with_(timing=timing), step_time=0.004)).item("input_pipeline").status is CheckStatus.PASS


def test_a_pipeline_many_times_the_model_is_input_bound_however_busy_the_machine():
    """Fresh-clone run with another CPU-bound process: the slow_map trial's
    steps were stretched to ~150 ms by the load, so the 36 ms pipeline (41x the
    model's 0.87 ms) was under 30 % of them and check 2 passed it."""
    timing = {"pipeline_s": 0.0362, "compute_s": 0.00087}
    assert judge(result(with_(timing=timing), step_time=0.15)).item("input_pipeline").status is CheckStatus.WARN
    timing = {"pipeline_s": 0.0030, "compute_s": 0.00087}  # 3.4x the model, 2 % of the busy step: not starving it
    assert judge(result(with_(timing=timing), step_time=0.15)).item("input_pipeline").status is CheckStatus.PASS


def test_arrays_fed_to_fit_skip_the_timing_with_the_reason():
    extra = with_(timing=None)
    extra["check.skips"] = {
        "timing": "fit was given in-memory arrays: Keras slices them itself, there is no tf.data pipeline to time"
    }
    item = judge(result(extra)).item("input_pipeline")
    assert item.status is CheckStatus.SKIP and "in-memory arrays" in item.summary


def test_probe_error_is_the_skip_reason():
    extra = with_(timing=None)
    extra["check.errors"] = ["timing: InvalidArgumentError: boom"]
    report = judge(result(extra))
    assert report.item("input_pipeline").summary == "the probe failed: timing: InvalidArgumentError: boom"
    assert report.trial["probe_errors"] == ["timing: InvalidArgumentError: boom"]


# -- 4. initial loss ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first,status",
    [
        (2.30, "pass"),
        (2.85, "pass"),
        (2.95, "warn"),
        (4.7, "fail"),
        (1.6, "warn"),
        (1.1, "fail"),
        (float("inf"), "fail"),
    ],
)
def test_initial_loss_against_ln_num_classes(first, status):
    report = judge(result(losses=(first,) + FALLING[1:]))
    item = report.item("initial_loss")
    assert item.status.value == status
    assert (
        "expected at initialisation: chance ln(10) = 2.303; pass 1.727..2.878 (-25%, +max(25%, 0.5 nats)); "
        "fail below 1.151 or above 4.605"
    ) in item.evidence


def test_few_classes_get_absolute_slack_above_chance():
    loss = {"name": "binary_crossentropy", "kind": "binary", "from_logits": True, "source": "compile"}
    model = dict(CLEAN["check.model"], output_width=1)
    y = tstats("labels", (64, 1), min=0, max=1, mean=0.5, std=0.5, nan=0, inf=0, integral=True)
    for first, status in ((0.97, CheckStatus.PASS), (1.4, CheckStatus.WARN), (2.8, CheckStatus.FAIL)):
        report = judge(result(with_(loss=loss, model=model, batches=batches(y=y)), losses=(first,) + FALLING[1:]))
        assert report.item("initial_loss").status is status, first


def test_binary_chance_is_ln_2():
    loss = {"name": "binary_crossentropy", "kind": "binary", "from_logits": False, "source": "compile"}
    model = dict(CLEAN["check.model"], output_width=1, last_activation="sigmoid")
    y = tstats("labels", (64, 1), min=0, max=1, mean=0.5, std=0.5, nan=0, inf=0, integral=True)
    item = judge(result(with_(loss=loss, model=model, batches=batches(y=y)), losses=(0.70,) + FALLING[1:])).item(
        "initial_loss"
    )
    assert item.status is CheckStatus.PASS and "ln(2) = 0.693" in item.summary


def test_softmax_applied_twice_warns():
    model = dict(CLEAN["check.model"], last_activation="softmax")
    item = judge(result(with_(model=model))).item("initial_loss")
    assert item.status is CheckStatus.WARN and "applies it again" in item.summary


def test_logits_into_a_probability_loss_warns():
    loss = dict(CLEAN["check.loss"], from_logits=False, name="sparse_categorical_crossentropy")
    item = judge(result(with_(loss=loss))).item("initial_loss")
    assert item.status is CheckStatus.WARN and "from_logits=True" in item.fix


def test_num_classes_reasons():
    assert num_classes(None, None) == (
        None,
        "the loss was not seen (no compiled loss, no Keras loss or cross-entropy call)",
    )
    assert (
        num_classes({"kind": "sparse", "name": "s"}, {"output_width": None})[1] == "the model's output width is unknown"
    )
    assert num_classes({"kind": "sparse", "name": "s"}, {"output_width": 7}) == (7, "")


# -- 5. short run -------------------------------------------------------------------------------


def test_flat_loss_fails_the_short_run():
    item = judge(result(losses=(2.3,) * 30)).item("short_run")
    assert item.status is CheckStatus.FAIL and "does not fall" in item.summary


def test_crash_fails_the_short_run_with_the_error():
    report = judge(result(losses=(2.3, 2.2), crashed=True, error="ValueError: shapes do not match"))
    item = report.item("short_run")
    assert item.status is CheckStatus.FAIL and "ValueError: shapes do not match" in item.summary


def test_crash_before_anything_skips_the_rest_with_reasons():
    r = TrialResult(crashed=True, error="ModuleNotFoundError: No module named 'tensorflow_addons'", extra={})
    report = judge(r)
    assert report.item("short_run").status is CheckStatus.FAIL
    for key in ("environment", "input_pipeline", "first_batches", "parameters"):
        item = report.item(key)
        assert item.status is CheckStatus.SKIP and item.summary, key
    assert "crashed before training" in report.item("first_batches").summary


def test_timeout_fails_the_short_run():
    assert judge(result(losses=(2.3,), timed_out=True)).item("short_run").status is CheckStatus.FAIL


def test_too_few_steps_is_a_skip():
    item = judge(result(losses=(2.3, 2.2))).item("short_run")
    assert item.status is CheckStatus.SKIP and "4 are needed" in item.summary


# -- 6. parameters and 1. environment --------------------------------------------------------------


def test_parameter_count_against_expectation():
    assert judge(result(), CheckOptions(expect_params=11018)).item("parameters").status is CheckStatus.PASS
    item = judge(result(), CheckOptions(expect_params=12000)).item("parameters")
    assert item.status is CheckStatus.FAIL and "expected 12,000" in item.summary


def test_frozen_model_warns():
    model = dict(CLEAN["check.model"], trainable=0, non_trainable=500)
    assert judge(result(with_(model=model))).item("parameters").status is CheckStatus.WARN


def test_expected_gpu_absent_warns_with_the_fix():
    env = dict(CLEAN["check.env"], gpu_expected=True, gpu_expected_why="CUDA_VISIBLE_DEVICES=0")
    item = judge(result(with_(env=env))).item("environment")
    assert item.status is CheckStatus.WARN and "a GPU is expected (CUDA_VISIBLE_DEVICES=0)" in item.summary
    assert "nvidia-smi" in item.fix
    env["build"] = {"is_cuda_build": False}
    assert "CPU-only build" in judge(result(with_(env=env))).item("environment").fix


def test_gpu_present_passes():
    env = dict(CLEAN["check.env"], gpu_expected=True, physical_devices={"CPU": 1, "GPU": 2})
    assert judge(result(with_(env=env))).item("environment").summary.endswith("2 GPU")


def test_the_build_info_is_read_one_way_for_check_and_the_environment():
    """envprobe.build_info: `tfrepro check`'s env["build"] (probes.py) and the
    environment's build_info read it alike: a list stays a list of strings
    (check had its Python repr), anything else not JSON becomes its str."""
    from types import SimpleNamespace

    from tfrepro.inside import INSIDE_DIR

    spec = importlib.util.spec_from_file_location("_envprobe_under_test", INSIDE_DIR / "envprobe.py")
    envprobe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(envprobe)
    info = {"is_cuda_build": True, "cuda_version": "12.5.1", "cuda_compute_capabilities": ("sm_60", "compute_80")}
    tf = SimpleNamespace(sysconfig=SimpleNamespace(get_build_info=lambda: {**info, "odd": Path("x")}))
    assert envprobe.build_info(tf) == {**info, "cuda_compute_capabilities": ["sm_60", "compute_80"], "odd": "x"}


# -- the probe's own helpers (NumPy, no TensorFlow) ----------------------------------------------------


def test_tensor_stats_counts_nan_and_inf_and_describes_finite_values():
    probes = _probes()
    a = np.array([[1.0, np.nan], [np.inf, 3.0]], dtype="float32")
    d = probes.tensor_stats("x", a, np)
    assert (d["nan"], d["inf"], d["min"], d["max"], d["shape"]) == (1, 1, 1.0, 3.0, [2, 2])
    assert json.dumps(d, allow_nan=False)
    labels = probes.tensor_stats("y", np.array([1, 10, 3]), np)
    assert (labels["kind"], labels["min"], labels["max"]) == ("int", 1.0, 10.0)
    one_hot = probes.tensor_stats("y", np.eye(3, dtype="float32")[[0, 2]] * [[1], [0]], np)
    assert (one_hot["row_sum_min"], one_hot["row_sum_max"]) == (0.0, 1.0)


def test_all_nan_tensor_has_no_range_but_counts():
    d = _probes().tensor_stats("x", np.full((2, 2), np.nan), np)
    assert d["nan"] == 4 and "min" not in d


def test_gpu_expectation_from_the_environment(monkeypatch):
    probes = _probes()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert probes.gpu_expected(None) == (True, "CUDA_VISIBLE_DEVICES=0,1")
    assert probes.gpu_expected(False) == (False, None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    monkeypatch.setattr(probes.os.path, "exists", lambda p: False)
    monkeypatch.setattr(probes.shutil, "which", lambda n: None)
    assert probes.gpu_expected(None) == (False, None)


@pytest.mark.parametrize("path", [PROBES, TOOLS], ids=["probes", "probe_tools"])
def test_probe_modules_import_no_tensorflow_and_no_tfrepro(path):
    text = path.read_text()
    assert "import tfrepro" not in text and "from tfrepro" not in text
    top_level = [ln for ln in text.splitlines() if ln.startswith(("import ", "from "))]
    assert not any("tensorflow" in ln or "keras" in ln or "numpy" in ln for ln in top_level)


def test_judge_output_is_json_serialisable_even_with_nan_losses():
    report = judge(result(losses=(float("nan"),), first_nonfinite_step=1))
    assert json.loads(json.dumps(report.to_dict(), allow_nan=False))["trial"]["first_loss"] is None
    assert not math.isnan(report.trial["steps_run"])


def test_dataset_elements_split_like_keras_and_dict_loops():
    split = _probes().split_element
    assert split(("x", "y")) == ("x", "y")
    assert split(("x", "y", "w")) == ("x", "y", "w")
    assert split({"image": "x", "label": "y"}) == ("x", "y")
    assert split({"a": "x1", "b": "x2", "target": "y"}) == ({"a": "x1", "b": "x2"}, "y")
    assert split({"a": "x1", "b": "x2"}) == ({"a": "x1", "b": "x2"},)
    assert split("x") == ("x",)


def test_reason_names_the_first_failing_check_then_the_first_warning():
    y = tstats("labels", (64,), "int32", min=1, max=10, mean=5, std=3, integral=True)
    timing = {"pipeline_s": 0.036, "compute_s": 0.00035}
    report = judge(result(with_(batches=batches(y=y), timing=timing), step_time=0.04))
    assert report.reason().startswith("check 3 (first batches) fails: batches 1 and 2 labels: class ids in [1, 10]")
    assert report.to_dict()["flagged"] == ["input_pipeline", "first_batches"]
    only_warn = judge(result(with_(timing=timing), step_time=0.04))
    assert only_warn.reason().startswith("check 2 (input pipeline) warns: input-bound")
    assert judge(result()).reason() is None


def test_checks_for_bisect_never_raise(tmp_path):
    from tfrepro.check.run import checks_for_result

    class Unloadable:
        manifest = None  # no trial settings: run_checks cannot even start

    out = checks_for_result(Unloadable())
    assert out["status"] == "error" and out["error"].startswith("AttributeError") and out["checks"] == []


def test_input_bound_judged_on_the_quiet_steps_not_the_load_spikes():
    timing = {"pipeline_s": 0.036, "compute_s": 0.00035}
    # Steps that wait for their batch (~40 ms), half of them stretched by a busy machine.
    steps = (3.0, 0.1, 0.1) + (0.04, 0.2) * 10
    r = TrialResult(
        losses=FALLING[: len(steps)],
        step_times=steps,
        mode="loop",
        steps_run=len(steps),
        weights_finite=True,
        extra=with_(timing=timing),
    )
    item = judge(r).item("input_pipeline")
    assert item.status is CheckStatus.WARN
    assert "trial step 40 ms" in item.summary


def test_no_training_seen_says_how_a_loop_reports_steps():
    item = judge(TrialResult(mode="none", extra=copy.deepcopy(CLEAN))).item("short_run")
    assert item.status is CheckStatus.SKIP and "step=<int> loss=<float>" in item.summary
    assert "no optimizer applied gradients" in item.summary and "apply_gradients" in item.fix


# -- bisect: a failing baseline comes with the checks ------------------------------------------------


def _project(tmp_path):
    from tfrepro.project import Project

    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text("x = 0\n# tfrepro: feature xla -- jit\n# x += 1\n# tfrepro: end\n")
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 20\n")
    return Project.load(root)


class ProbedRunner:
    """`run_trial` stand-in: the baseline goes NaN from step 1; the probed
    run (the one given the probe plugin) also carries what the probes saw."""

    def __init__(self):
        self.probed = []

    def __call__(self, project, enabled, settings, how=TrialOptions()):
        plugins, plugin_options = how.plugins, how.plugin_options
        nan = dict(
            losses=(float("nan"),),
            step_times=(0.01,),
            first_nonfinite_step=1,
            mode="fit",
            steps_run=1,
            weights_finite=False,
            nonfinite_weights=("dense/kernel",),
        )
        if plugins:
            self.probed.append((tuple(enabled), [Path(p).name for p in plugins], dict(plugin_options)))
            return result(with_(batches=batches(x=dict(X_OK, nan=7))), **nan)
        return TrialResult(enabled=tuple(enabled), **nan)


def test_bisect_baseline_fails_with_the_checks_as_its_reason(tmp_path):
    from tfrepro.bisect.engine import BisectOptions, bisect
    from tfrepro.check.run import checks_for_result

    runner = ProbedRunner()
    doc = bisect(_project(tmp_path), BisectOptions(baseline_checks=checks_for_result), runner=runner).to_dict()
    assert doc["status"] == "baseline-fails" and doc["symptom"] == "nan"
    assert runner.probed == [((), ["probes.py"], runner.probed[0][2])]  # one probed run, of the baseline
    assert doc["checks"]["flagged"] == ["first_batches"]
    assert doc["checks"]["reason"].startswith("check 3 (first batches) fails: batch 1 inputs: 7 NaN")
    assert "sanity check 3 (first batches) fails: batch 1 inputs: 7 NaN" in doc["error"]
    saved = json.loads((Path(doc["run_dir"]) / "result.json").read_text())  # relative to the cwd, or absolute
    assert saved["checks"]["flagged"] == ["first_batches"]


def test_environment_names_tf_keras_when_the_script_uses_it():
    env = dict(CLEAN["check.env"])
    env.pop("keras")
    env["tf_keras"] = "2.21.0"
    item = judge(result(with_(env=env))).item("environment")
    assert item.summary.startswith("TensorFlow 2.21.0, tf_keras 2.21.0, Python 3.11.7")


def test_probes_that_failed_to_load_say_so_in_every_skip():
    r = TrialResult(
        losses=FALLING,
        step_times=(0.001,) * 30,
        mode="fit",
        steps_run=30,
        weights_finite=True,
        extra={"harness_errors": ["plugin /x/probes.py: SyntaxError: invalid syntax"]},
    )
    report = judge(r)
    for key in ("environment", "input_pipeline", "first_batches", "parameters"):
        assert (
            report.item(key).summary == "the probes failed to load: plugin /x/probes.py: SyntaxError: invalid syntax"
        ), key
    assert report.item("short_run").status is CheckStatus.PASS  # the trial's own measurements still count


def test_batches_without_labels_say_the_labels_were_not_judged():
    item = judge(result(with_(batches=batches(y=None)))).item("first_batches")
    assert item.status is CheckStatus.PASS
    assert "labels not judged: the batches carry no labels" in item.evidence
