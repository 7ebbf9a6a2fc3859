"""`tfrepro report`: scrubbing, localisation parsing, setup scan, and the
bundle built from a hand-written run over a tiny marked project.

The trial runner is replaced by a scripted one that reads the exported
script it is given (so a wrong export changes the verdict); the real
re-run, check_numerics and environment probe are in test_report_e2e.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import tb_read
from click.testing import CliRunner
from report_fakes import ScriptedRunner, build, make_project, make_run

from tfrepro.cli import main
from tfrepro.errors import UserError
from tfrepro.report import tables
from tfrepro.report.answer import Report
from tfrepro.report.bundle import find_run
from tfrepro.report.localize import enclosing_scope, parse_check_numerics
from tfrepro.report.scan import BEGIN, scan_setup
from tfrepro.report.scrub import REDACTED, Scrubber, capture_env

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "MY_PASSWORD": "correct-horse-battery",
}

# TensorFlow's bug issue form, field by field, then what it forgets.
ISSUE_HEADINGS = [
    "### Issue type",
    "### Have you reproduced the bug with TensorFlow Nightly?",
    "### Source",
    "### TensorFlow version",
    "### Custom code",
    "### OS platform and distribution",
    "### Mobile device",
    "### Python version",
    "### Bazel version",
    "### GCC/compiler version",
    "### CUDA/cuDNN version",
    "### GPU model and memory",
    "### Current behavior?",
    "### Standalone code to reproduce the issue",
    "### Relevant log output",
    "## Beyond the issue form",
    "### Reproduction",
    "### Versions and training setup",
    "### Bisect evidence",
]
ISSUE_ROWS = [
    "| Keras |",
    "| Precision policy |",
    "| Distribution / replicas |",
    "| XLA |",
    "| Determinism |",
    "Relevant environment variables",
    "Culprits",
    "Every trial",
    "```diff",
]


def check_issue_fields(text: str) -> None:
    missing = [h for h in ISSUE_HEADINGS + ISSUE_ROWS if h not in text]
    assert not missing, f"ISSUE.md lacks {missing}"
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert [h for h in headings if h in ISSUE_HEADINGS] == ISSUE_HEADINGS  # in the form's order


# --------------------------------------------------------------------------- scrubbing


def test_scrubber_replaces_secret_values_wherever_they_appear():
    s = Scrubber.from_environ({**SECRETS, "HOME": "/home/alice", "PATH": "/usr/bin"})
    text = (
        f"Traceback: File /home/alice/proj/repro.py, token={SECRETS['HF_TOKEN']}\n"
        f"login failed for {SECRETS['MY_PASSWORD']} with key {SECRETS['AWS_SECRET_ACCESS_KEY']}"
    )
    out = s.scrub(text)
    for v in SECRETS.values():
        assert v not in out
    assert "~/proj/repro.py" in out and "/home/alice" not in out
    assert s.scrub(out) == out  # idempotent


def test_scrubber_leaves_code_and_other_users_alone():
    s = Scrubber.from_environ({"HOME": "/home/al"})
    code = (
        "norm = keras.layers.LayerNormalization(epsilon=1e-3)\n"
        "token = tokenizer(x)\n"
        'path = "/home/alice/data.csv"\n'
        'node = "sequential_1/custom_norm_1/Exp/CheckNumericsV2"\n'
        'digest = "3b5d5c3712955042212316173ccf37be800958e4c38d23d5c2e0fdd1c0c1a5e1"\n'
    )
    assert s.scrub(code) == code


def test_credential_shapes_are_redacted_even_without_a_variable():
    s = Scrubber.from_environ({"HOME": "/nonexistent-home"})
    text = (
        "key AKIAIOSFODNN7EXAMPLE, gh ghp_abcdefghijklmnopqrstuvwxyz0123456789, "
        "url https://bob:s3cr3tpass@example.com/x, password=hunter22 ok"
    )
    out = s.scrub(text)
    for leak in ("AKIAIOSFODNN7EXAMPLE", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "s3cr3tpass", "hunter22"):
        assert leak not in out
    assert "https://bob:" in out and "@example.com/x" in out


def test_env_capture_is_an_allow_list_with_redaction():
    env = {
        **SECRETS,
        "PATH": "/usr/bin",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "XLA_FLAGS": "--xla_dump_to=/home/alice/d",
        "TF_API_TOKEN": "abcd1234efgh",
        "TF_VAR_region": "eu",
        "CUDA_VISIBLE_DEVICES": "0",
        "HOME": "/home/alice",
    }
    got = capture_env(env, Scrubber.from_environ(env))
    assert got == {
        "CUDA_VISIBLE_DEVICES": "0",
        "TF_API_TOKEN": REDACTED,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "XLA_FLAGS": "--xla_dump_to=~/d",
    }


# --------------------------------------------------------------------------- localisation

GRAPH_ERROR = """Graph execution error:

Detected at node sequential_1/custom_norm_1/Exp/CheckNumericsV2 defined at (most recent call last):
  File "/tmp/x/_runprobe.py", line 11, in <module>
  File "/tmp/x/repro/repro.py", line 16, in <module>
  File "/venv/lib/python3.11/site-packages/keras/src/backend/tensorflow/trainer.py", line 399, in fit
  File "/venv/lib/python3.11/site-packages/keras/src/layers/layer.py", line 1002, in __call__
  File "/tmp/x/repro/repro.py", line 9, in call

!!! Detected Infinity or NaN in output 0 of graph op "Exp" (# of outputs: 1) !!!
  dtype: <dtype: 'float16'>
  shape: (16, 16)

  Input tensor: Tensor("sequential_1/custom_norm_1/mul:0", shape=(16, 16), dtype=float16)
  Graph name: "one_step_on_data"

  Stack trace of op's creation ("->": inferred user code):
    + ... (Omitted 36 frames)
    + ...e-packages/keras/src/backend/tensorflow/trainer.py (L134) one_step_on_data
    + repro.py (L9) call
 -> |

 : Tensor had +Inf values
\t [[{{node sequential_1/custom_norm_1/Exp/CheckNumericsV2}}]]"""

REPRO_SRC = '''import tensorflow as tf
import keras


class CustomNorm(keras.layers.Layer):
    """Softmax by hand."""

    def call(self, x):
        e = tf.exp(x * 20.0)
        return e / tf.reduce_sum(e, axis=-1, keepdims=True)
'''


def test_check_numerics_error_names_op_layer_and_line():
    loc = parse_check_numerics(
        GRAPH_ERROR,
        script="/tmp/x/repro/repro.py",
        source=REPRO_SRC,
        layers={"custom_norm": "CustomNorm", "dense": "Dense"},
    )
    assert loc.found
    assert (loc.op_type, loc.layer, loc.layer_class) == ("Exp", "custom_norm", "CustomNorm")
    assert (loc.file, loc.line, loc.function) == ("repro.py", 9, "CustomNorm.call")
    assert loc.code == "e = tf.exp(x * 20.0)"
    assert (loc.kind, loc.dtype, loc.node) == ("+Inf", "float16", "sequential_1/custom_norm_1/Exp")
    assert not loc.backward
    assert loc.headline() == (
        "first non-finite value (+Inf) produced by op `Exp` in layer `custom_norm` "
        "(CustomNorm) at repro.py:9 in `CustomNorm.call`"
    )
    assert "Stack trace" not in loc.excerpt and 'graph op "Exp"' in loc.excerpt
    # report.json's localization: its fields and headline, read back into the same value
    written = Report(localization=loc).json()["localization"]
    assert written == {**asdict(loc), "headline": loc.headline()}
    assert Report.of({"localization": written}).localization == loc


def test_the_localize_plugin_patches_the_keras_the_script_imports_and_imports_none(monkeypatch):
    """inside/localize_plugin.py: compile (XLA off) and the loss-scale start
    patched in whichever Keras the script imports (here tf_keras), when it
    does; the precision policy is the script's Keras's (ctx), never an
    `import keras` (which would load Keras 3 into a tf_keras trial)."""
    import importlib.util
    import sys
    from types import SimpleNamespace

    from tfrepro.inside import LOCALIZE_PLUGIN

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # install() chains its own
    spec = importlib.util.spec_from_file_location("_test_localize_plugin", LOCALIZE_PLUGIN)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)

    class Model:
        def compile(self, *args, **kwargs):
            self.compiled_with = kwargs

        def _flatten_layers(self, include_self=False):
            return []

    class LossScaleOptimizer:
        def __init__(self, inner, initial_scale=2**15):
            self.scale = initial_scale

    tf_keras = SimpleNamespace(
        __name__="tf_keras", Model=Model, mixed_precision=SimpleNamespace(LossScaleOptimizer=LossScaleOptimizer)
    )
    hooks, ends, recorded = {}, [], {}
    ctx = SimpleNamespace(
        after_import=hooks.__setitem__,
        add_end_hook=ends.append,
        keras=lambda: tf_keras,
        tf_settings=lambda: {"op_determinism": False, "run_functions_eagerly": True},
        replicas=lambda fits: None,
        record=recorded.__setitem__,
    )
    plugin.install(ctx)
    assert set(hooks) == {"tensorflow", "keras", "tf_keras"}
    hooks["tf_keras"](tf_keras)
    model = Model()
    model.compile(loss="mse", jit_compile=True)
    assert model.compiled_with["jit_compile"] is False and LossScaleOptimizer(None).scale == 1.0
    ends[0]([])
    settings = recorded["localize"]["settings"]
    assert settings["jit_compile_requested"] == ["tf_keras.Model.compile(jit_compile=True)"]
    assert "precision_policy" not in settings  # the trial's own field (report/localize.py)
    assert (settings["op_determinism"], settings["run_functions_eagerly"]) == (False, True)  # ctx's one reading


_REAL_LOSS_SCALES = """
import importlib.util, json, sys
from types import SimpleNamespace

spec = importlib.util.spec_from_file_location("_localize_plugin", sys.argv[1])
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
hooks, settings = {}, {}
plugin.install(SimpleNamespace(after_import=hooks.__setitem__, add_end_hook=lambda fn: None))
import keras, tf_keras

hooks["keras"](keras)
hooks["tf_keras"](tf_keras)
LSO = tf_keras.mixed_precision.LossScaleOptimizer
scales = {
    "tf_keras": float(LSO(tf_keras.optimizers.SGD(), True, 2**15).loss_scale),
    "tf_keras legacy": float(LSO(tf_keras.optimizers.legacy.SGD(), True).loss_scale),
    "tf_keras by name": float(LSO(inner_optimizer=tf_keras.optimizers.SGD(), initial_scale=4.0).loss_scale),
    "tf_keras fixed": float(LSO(tf_keras.optimizers.SGD(), False, 8.0).loss_scale),
    "keras": float(keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), 2.0**15).initial_scale),
}
print(json.dumps(scales))
"""


def test_the_localize_plugin_starts_the_dynamic_loss_scale_of_every_keras_at_1(tmp_path):
    """Positional arguments bound by name (tf_keras: `(inner, dynamic,
    initial_scale)`, Keras 3: `(inner, initial_scale)`), and tf_keras's
    metaclass builds LossScaleOptimizer / LossScaleOptimizerV3, not the
    public class: the scale the optimizer starts at, as it reports it. A
    fixed scale (`dynamic=False`) skips no step: it is kept."""
    import subprocess
    import sys

    from tfrepro.inside import LOCALIZE_PLUGIN

    script = tmp_path / "scales.py"
    script.write_text(_REAL_LOSS_SCALES)
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, str(script), str(LOCALIZE_PLUGIN)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    scales = json.loads(run.stdout.strip().splitlines()[-1])
    assert scales == {
        "tf_keras": 1.0,
        "tf_keras legacy": 1.0,
        "tf_keras by name": 1.0,
        "tf_keras fixed": 8.0,
        "keras": 1.0,
    }


def test_other_errors_are_not_mistaken_for_a_localisation():
    loc = parse_check_numerics("ValueError: shapes (3,) and (4,) are incompatible", script="repro.py")
    assert not loc.found and "not a check_numerics report" in loc.note


def test_enclosing_scope_is_innermost_def():
    assert enclosing_scope(REPRO_SRC, 9) == "CustomNorm.call"
    assert enclosing_scope(REPRO_SRC, 6) == "CustomNorm"
    assert enclosing_scope(REPRO_SRC, 1) is None


def test_setup_scan_reads_live_code_only():
    src = (
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "# model.compile(jit_compile=True)\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "strategy = tf.distribute.MirroredStrategy()\n"
        "tf.config.experimental.enable_op_determinism()\n"
    )
    s = scan_setup(src)
    assert s.precision_policy == "mixed_float16"
    assert s.xla.startswith("off")
    assert s.distribution == "MirroredStrategy" and s.replicas.startswith("2")
    assert "enable_op_determinism" in s.determinism
    assert scan_setup("x = 1\n").precision_policy.startswith("float32")


def _rerun(policy=None, replicas=None, jit=None, strategies=(), eagerly=None):
    """A re-run's trial as the harness writes it: the fields every trial has
    (inside/devices.py) and the setup plugin's `extra["setup"]`."""
    from tfrepro.trials.values import TrialResult

    extra = {"strategies": [{"strategy": s, "replicas": replicas, "devices": []} for s in strategies]}
    if eagerly is not None:
        extra["setup"] = {"run_functions_eagerly": eagerly}
    fits = ({"call": "fit#1", "jit_compile": jit},) if jit is not None else ()
    return TrialResult(precision_policy=policy, replicas_in_sync=replicas, compile_modes=fits, extra=extra)


def test_facts_seen_at_run_time_override_the_static_read():
    """The re-run's trial, then the localisation's settings, by one rule."""
    from tfrepro.report.scan import merge_runtime

    s, seen = scan_setup("strategy = tf.distribute.MirroredStrategy()\n"), " (observed at run time)"
    rerun = _rerun("mixed_float16", 2, False, ["MirroredStrategy"], eagerly=True)
    got = merge_runtime(s, rerun, None)
    assert (got.precision_policy, got.replicas, got.distribution) == (
        "mixed_float16" + seen,
        "2" + seen,
        "MirroredStrategy",
    )
    assert got.xla == s.xla + "; model.jit_compile False at run time" and got.eager.endswith(seen)
    localized = {"jit_compile_requested": ["tf.function"], "op_determinism": True, "replicas": None}
    got = merge_runtime(s, rerun, localized)  # type: ignore[arg-type]
    assert (got.xla, got.determinism, got.replicas) == (
        "tf.function" + seen,
        "op determinism enabled" + seen,
        "2" + seen,
    )
    assert merge_runtime(s, _rerun(jit=True), None).xla == "jit_compile=True in Model.fit" + seen
    assert merge_runtime(s, _rerun(), None) == merge_runtime(s, None, None) == s


def test_the_setup_is_what_the_rerun_trial_recorded_once():
    """report.json's `setup` reads the re-run trial's own fields (the model's
    precision policy, the fit's resolved jit_compile), not a second record of
    the setup plugin's (the global policy at the end; an unknown jit_compile
    written as False). Before: a script that set the global policy back
    after fit was reported float32, and an unknown jit_compile as False."""

    from tfrepro.report.answer import Reproduction
    from tfrepro.report.scan import merge_runtime

    trial = _rerun("mixed_float16", 1, None, eagerly=True)
    trial.extra["setup"].update(precision_policy="float32", replicas=1, jit_compile=False)  # the old second record
    # as bundle.document reads it: the exported source's scan, then the re-run's trial as report.json holds it
    got = merge_runtime(scan_setup("import keras\n"), Reproduction(candidate=trial.to_dict()).trial, None)
    assert got.precision_policy == "mixed_float16 (observed at run time)"
    assert got.xla == scan_setup("import keras\n").xla and got.eager.endswith("(observed at run time)")


def test_setup_scan_and_detection_know_the_same_policy_setters():
    """Keras 3's `keras.config.set_dtype_policy` sets the precision policy for
    zero-edit detection and the setup scan alike (the scan knew only
    set_global_policy); a `set_policy` of another library is neither's."""
    from tfrepro.annotate import annotate_text

    for call, policy in (("keras.config.set_dtype_policy", "mixed_bfloat16"), ("retry.set_policy", None)):
        src = f'import keras\n{call}("{policy or "exponential"}")\n'
        found = [f.description for f in annotate_text(src, "train.py")[1]]
        assert found == ([f"{policy} compute policy"] if policy else []), call
        assert scan_setup(src).precision_policy == (policy or "float32 (Keras default)"), call


def test_setup_scan_reads_tf_keras_as_routing_does():
    """`from tf_keras import ...` turns tf_keras on; the words in a string or a
    comment do not (scan.py missed the first and took the second)."""
    on = ("from tf_keras import layers\n", "import numpy as np\nimport tf_keras\n")
    off = ('print("import tf_keras")\n', "x = 1  # import tf_keras\n", "import tf_keras_addons\n")
    assert [scan_setup(s).keras_flavour.startswith("tf_keras") for s in on + off] == [True, True, False, False, False]


# --------------------------------------------------------------------------- event files


def test_event_file_loads_in_tensorboard(tmp_path):
    path = tables.write_run(tmp_path / "run", {"loss": [2.5, 1.25, None], "step_time_ms": [4.0]})
    got = tb_read.scalars(path)
    assert got["loss"][:2] == [(1, 2.5), (2, 1.25)] and got["loss"][2][0] == 3 and math.isnan(got["loss"][2][1])
    assert got["step_time_ms"] == [(1, 4.0)]


# --------------------------------------------------------------------------- bundles


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_nan_bundle_holds_the_exported_repro_and_every_issue_field(project, monkeypatch):
    monkeypatch.setattr("tfrepro.report.tables.have_tensorboard", lambda: False)
    run = make_run(project, "nan", ["mixed_precision"])
    runner = ScriptedRunner()
    b = build(run, runner)
    assert b.out == (run / "report").resolve()
    repro = (b.out / "repro.py").read_text()
    code, footer = repro.split(
        BEGIN
    )  # the footer, last, says whether the run shows the NaN (report/scan.py `with_footer`)
    assert "tfrepro" not in code and 'keras.mixed_precision.set_global_policy("mixed_float16")' in code
    assert "symptom seen: NaN/Inf" in footer and "the run saw it at step 2" in footer
    assert 'MODE = "fit"' in repro and 'MODE = "loop"' not in repro  # inactive parts removed
    ref = (b.out / "reference.py").read_text()
    assert "mixed_float16" not in ref
    assert b.report.rerun.reproduced is True and len(runner.calls) == 1
    issue = (b.out / "ISSUE.md").read_text()
    check_issue_fields(issue)
    assert "becomes NaN/Inf at step 2" in issue
    assert '+keras.mixed_precision.set_global_policy("mixed_float16")' in issue
    assert "reproduced yes" in issue and "it needs only TensorFlow and NumPy." in issue
    assert (b.out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (b.out / "steps.png").exists()
    runs = sorted(d.name for d in (b.out / "tensorboard").iterdir())
    assert runs == ["01_baseline_ok", "02_mixed_precision_nan"]
    [bad] = (b.out / "tensorboard" / runs[1]).iterdir()
    assert tb_read.scalars(bad)["loss"][0] == (1, 1.0)
    assert "tensorboard not installed" in (b.out / "ISSUE.md").read_text()
    doc = json.loads((b.out / "report.json").read_text())
    assert doc["culprits"] == ["mixed_precision"] and doc["reproduction"]["reproduced"] is True
    assert b.report.json() == doc  # report.json is written from the Report and read back into it
    # Paths under the home directory show as ~.
    assert doc["project"] == "~/proj"


def test_crash_bundle_quotes_the_traceback(project):
    run = make_run(project, "crash", ["bad_reshape"])
    b = build(run, ScriptedRunner())
    assert b.report.rerun.reproduced is True and "cannot reshape" in b.report.rerun.detail
    issue = (b.out / "ISSUE.md").read_text()
    check_issue_fields(issue)
    assert "training raises: ValueError: cannot reshape array of size 32 into shape (3,7)." in issue
    assert 'Traceback (most recent call last):\n  File "repro.py", line 30' in issue


def test_a_crash_with_another_message_is_not_the_bisects_crash(project):
    run = make_run(project, "crash", ["bad_reshape"])
    b = build(run, ScriptedRunner(crash_error="ImportError: No module named 'helpers'"))
    assert b.report.rerun.reproduced is False
    assert b.report.rerun.detail == (
        "the script raised: ImportError: No module named 'helpers', not the "
        "bisect's ValueError: cannot reshape array of size 32 into shape (3,7)"
    )
    again = build(run, ScriptedRunner(crash_error="ValueError: cannot reshape array of size 32 into shape (3,7)  "))
    assert again.report.rerun.reproduced is True


def test_a_repro_that_no_longer_fails_says_so(project):
    run = make_run(project, "nan", ["mixed_precision"])
    b = build(run, ScriptedRunner(healthy=True))
    assert b.report.rerun.reproduced is False
    assert "reproduced no" in (b.out / "ISSUE.md").read_text()


def test_mismatch_is_judged_against_the_reference_configuration(project):
    # The minimal failing config keeps lr_warmup (affects_loss): the reference
    # is lr_warmup alone, the culprit the custom loop.
    run = make_run(project, "mismatch", ["custom_loop"], ["custom_loop", "lr_warmup"])
    runner = ScriptedRunner()
    b = build(run, runner)
    assert len(runner.calls) == 2
    ref = (b.out / "reference.py").read_text()
    assert "PolynomialDecay" in ref and 'MODE = "fit"' in ref
    assert b.report.rerun.reproduced is True
    issue = (b.out / "ISSUE.md").read_text()
    check_issue_fields(issue)
    assert '-MODE = "fit"' in issue and '+MODE = "loop"' in issue
    assert "relative loss deviation" in b.report.rerun.detail


def test_slowdown_bundle_times_interleaved_pairs_and_draws_step_times(project):
    run = make_run(project, "slowdown", ["slow_callback"])
    runner = ScriptedRunner()
    b = build(run, runner, max_pairs=4)
    # R C R C R: each reference run serves the pairs on both sides of it;
    # the fake measures no load, so it takes two clear pairs (slowdown.py)
    assert ["SLEEP = 0.05" in c for c in runner.calls] == [False, True, False, True, False]
    assert b.report.rerun.reproduced is True and "x that of reference.py" in b.report.rerun.detail
    assert (b.out / "steps.png").read_bytes()[:4] == b"\x89PNG"
    issue = (b.out / "ISSUE.md").read_text()
    check_issue_fields(issue)
    assert "### Issue type\n\nPerformance" in issue


def test_secret_environment_values_never_reach_the_bundle(project):
    run = make_run(project, "nan", ["mixed_precision"])
    # A secret echoed into a trial's error line must not survive either.
    result = json.loads((run / "result.json").read_text())
    result["culprit_trial"]["error"] = (
        f"PermissionError: bad token {SECRETS['HF_TOKEN']} for login {SECRETS['MY_PASSWORD']}"
    )
    (run / "result.json").write_text(json.dumps(result))
    b = build(run, ScriptedRunner(), environ={**SECRETS, "TF_ENABLE_ONEDNN_OPTS": "0"})
    blobs = {p: p.read_bytes() for p in b.out.rglob("*") if p.is_file()}
    assert len(blobs) >= 5
    for name, value in SECRETS.items():
        leaks = [p.name for p, data in blobs.items() if value.encode() in data]
        assert not leaks, f"{name}'s value leaked into {leaks}"
    assert "TF_ENABLE_ONEDNN_OPTS=0" in (b.out / "ISSUE.md").read_text()


def test_find_run_takes_the_latest_run_of_a_project(project):
    make_run(project, "nan", ["mixed_precision"], run_id="20261129-100000")
    newer = make_run(project, "nan", ["mixed_precision"], run_id="20261129-110000")
    assert find_run(project) == newer
    assert find_run(newer) == newer
    with pytest.raises(UserError, match="no bisect run"):
        find_run(project / ".tfrepro" / "runs" / "20261129-100000" / "trials")


def test_healthy_run_is_not_reported(project):
    run = make_run(project, "nan", ["mixed_precision"], status="none")
    with pytest.raises(UserError, match="no failure to report"):
        build(run, ScriptedRunner())


def test_cli_without_any_run_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert r.exit_code == 2
    assert "no bisect run found" in r.output and "tfrepro bisect" in r.output


def test_commit_mode_reports_the_first_bad_commit_against_the_good_one(project):
    run = make_run(
        project, "nan", [], [], first_bad_commit="ab" * 20, commit={"sha": "ab" * 20, "subject": "Switch to float16"}
    )
    for name, policy in (("good", ""), ("bad", 'keras.mixed_precision.set_global_policy("mixed_float16")\n')):
        d = run / "commits" / name
        d.mkdir(parents=True)
        (d / "repro.py").write_text(f"import keras\n{policy}print('train')\n")
    result = json.loads((run / "result.json").read_text())
    result.update(
        good_project=str(run / "commits" / "good"),
        first_bad_project=str(run / "commits" / "bad"),
        good={"sha": "cd" * 20},
    )
    (run / "result.json").write_text(json.dumps(result))
    b = build(run, ScriptedRunner())
    assert "mixed_float16" in (b.out / "repro.py").read_text()
    assert "mixed_float16" not in (b.out / "reference.py").read_text()
    issue = (b.out / "ISSUE.md").read_text()
    assert "Since commit abababababab (Switch to float16)" in issue
    assert '+keras.mixed_precision.set_global_policy("mixed_float16")' in issue
    assert b.report.rerun.reproduced is True


def test_desktop_session_words_are_not_hunted_through_texts():
    env = {"XDG_SESSION_CLASS": "user", "DESKTOP_SESSION": "ubuntu", "AUTH_TYPE": "basic", "HOME": "/home/al"}
    text = "inferred user code on ubuntu, basic auth"
    assert Scrubber.from_environ(env).scrub(text) == text


def test_issue_states_gpu_and_cuda_when_present():
    from tfrepro.report.issue import render_issue

    doc = {
        "symptom": "nan",
        "culprits": ["xla"],
        "environment": {
            "tf_version": "2.21.0",
            "build_info": {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"},
            "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "memory": "40960 MiB", "compute_capability": "8.0"}],
            "tf_dist": {"name": "tensorflow", "version": "2.21.0", "source": "pip (binary wheel)"},
        },
    }
    text = render_issue(Report.of(doc))
    assert "### CUDA/cuDNN version\n\nCUDA 12.5.1 / cuDNN 9 (build info)\n" in text
    assert "### GPU model and memory\n\nNVIDIA A100-SXM4-40GB, 40960 MiB (compute capability 8.0)\n" in text
    assert text.startswith("# NaN/Inf loss with xla (TensorFlow 2.21.0)")


def test_cli_md_summary_names_the_bundle(project, monkeypatch):
    # The environment child imports TensorFlow (seconds); its facts are not
    # what this test is about.
    from tfrepro.report import envreport

    monkeypatch.setattr(envreport, "in_trial", lambda **kw: {"tf_version": "9.9.9"})
    run = make_run(project, "nan", ["mixed_precision"])
    r = CliRunner().invoke(main, ["report", str(project), "--no-rerun", "--no-localize"])
    assert r.exit_code == 0, r.output
    out = (run / "report").resolve()
    assert f"bundle: {out}" in r.output
    assert "reproduced: not checked (--no-rerun)" in r.output
    assert "  repro.py: the minimal failing script (features on: mixed_precision)" in r.output
    assert "# NaN/Inf loss with mixed_precision (TensorFlow 9.9.9)" in (out / "ISSUE.md").read_text()


def test_imports_beyond_tensorflow_and_numpy_are_named():
    from tfrepro.report.scan import extra_imports

    files = {
        "repro.py": "import os\nimport numpy as np\nimport tensorflow as tf\nfrom keras import ops\n"
        "import pandas as pd\nfrom tfrepro.features import parse\nimport helpers\n",
        "helpers.py": "from sklearn.metrics import f1_score\n",
    }
    assert extra_imports(files) == ["pandas", "sklearn", "tfrepro"]


def test_a_moved_project_is_reported_from_where_its_run_now_lives(project, tmp_path):
    # The run records the project's absolute path; after a move (or a copy of
    # a bisect suite's run) the project that holds the run dir is the truth.
    run = make_run(project, "nan", ["mixed_precision"])
    moved = project.parent / "moved"
    project.rename(moved)
    b = build(moved / ".tfrepro" / "runs" / run.name, ScriptedRunner())
    assert b.report.rerun.reproduced is True
    assert "mixed_float16" in (b.out / "repro.py").read_text()


def test_cli_json_prints_one_document_and_progress_goes_to_stderr(project, monkeypatch):
    from tfrepro.report import envreport

    monkeypatch.setattr(envreport, "collect", lambda **kw: {"tf_version": "9.9.9"})
    make_run(project, "nan", ["mixed_precision"])
    r = CliRunner().invoke(main, ["report", str(project), "--json", "--no-rerun", "--no-localize"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["culprits"] == ["mixed_precision"] and Path(doc["bundle"], "ISSUE.md").is_file()
    assert "describing the environment" in r.stderr
    assert CliRunner().invoke(main, ["report", str(project), "--format", "json"]).exit_code == 2


def test_features_the_bisect_kept_on_stay_on_in_the_repro(project):
    """`tfrepro bisect --skip mixed_precision` keeps it ON in every trial
    (result.json `fixed_on`); the exported repro and its reference are
    those trials' scripts, so it is ON in both."""
    run = make_run(project, "crash", ["bad_reshape"], fixed_on=["mixed_precision"])
    b = build(run, ScriptedRunner())
    policy = 'keras.mixed_precision.set_global_policy("mixed_float16")'
    assert policy in (b.out / "repro.py").read_text() and policy in (b.out / "reference.py").read_text()
    run2 = make_run(project, "crash", ["bad_reshape"], run_id="20261129-130000")
    b2 = build(run2, ScriptedRunner())
    assert policy not in (b2.out / "repro.py").read_text()  # without it: OFF, as the trials had it


def test_the_bisect_records_what_it_kept_on(tmp_path):
    from test_engine import FEATS, FakeRunner, nan_when
    from test_engine import make_project as engine_project

    from tfrepro.bisect.engine import BisectOptions, bisect
    from tfrepro.project import selection

    p = engine_project(tmp_path, FEATS)
    p = p.exclude(selection(p.feature_names, None, ["xla"], root=p.root))
    doc = bisect(p, BisectOptions(), runner=FakeRunner(nan_when("mixed_precision"))).to_dict()
    assert doc["fixed_on"] == ["xla"] and "xla" not in doc["features"]


def test_the_localisation_states_the_policy_its_model_trained_in(monkeypatch):
    """The check_numerics trial's precision policy is the trial's own field (the
    first fit's model's policy): a script that builds its model under
    mixed_float16 and then sets the global policy back to float32 trained in
    mixed_float16 (before: the plugin's read of the global policy at the end)."""
    from tfrepro.report import localize as loc
    from tfrepro.trials.values import TrialResult

    facts = {"completed": True, "settings": {"jit_compile_requested": [], "precision_policy": "float32"}}
    got = TrialResult(precision_policy="mixed_float16", extra={"localize": facts})
    monkeypatch.setattr(loc, "run_as_written", lambda root, settings, how: got)
    out = loc.localize({"repro.py": "print(1)\n"})
    assert out.settings["precision_policy"] == "mixed_float16"
    assert out.settings["jit_compile_requested"] == []
