"""ISSUE.md against TensorFlow's bug issue form, and the Keras routing
(fake report documents: no TensorFlow, no run)."""

from __future__ import annotations

import math
import re

import pytest

from tfrepro.report.answer import Report
from tfrepro.report.issue import KERAS, TENSORFLOW, TF_KERAS, render_issue, route

ENV = {
    "tf_version": "2.21.0",
    "python": "3.11.9",
    "os": "Ubuntu 22.04.4 LTS",
    "platform": "Linux-6.5",
    "machine": "x86_64",
    "tf_dist": {"name": "tensorflow", "version": "2.21.0", "source": "pip (binary wheel)"},
    "keras_version": "3.12.0",
    "build_info": {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"},
    "gpus": [
        {"name": "NVIDIA A100-SXM4-40GB", "memory": "40960 MiB", "compute_capability": "8.0", "driver": "550.54.15"}
    ],
    "nvidia_driver": "550.54.15",
    "cuda_wheels": {"nvidia-cudnn-cu12": "9.3.0.75", "nvidia-cuda-runtime-cu12": "12.5.82"},
    "ld_library_path": "/usr/local/cuda/lib64",
}
REPRO = "import numpy as np\nimport tensorflow as tf\n\nmodel = tf.keras.Sequential()\nmodel.fit(x, y)\n"
TRACEBACK = (
    'Traceback (most recent call last):\n  File "repro.py", line 30, in <module>\n'
    '  File "/venv/lib/python3.11/site-packages/tensorflow/python/ops/array_ops.py", line 9, in reshape\n'
    "ValueError: cannot reshape array of size 32 into shape (3,7)"
)


def doc(symptom: str, **extra) -> dict:
    trial = {
        "nan": {"losses": [1.0, math.nan], "first_nonfinite_step": 2},
        "slowdown": {"median_step_time": 0.06, "step_times": [0.5, 0.06, 0.06, 0.06, 0.06]},
        "crash": {
            "error": "ValueError: cannot reshape array of size 32 into shape (3,7)",
            "extra": {"error_detail": TRACEBACK},
        },
    }[symptom]
    return {
        "symptom": symptom,
        "status": "found",
        "culprits": ["mixed_precision"],
        "environment": ENV,
        "baseline": {"losses": [1.0, 0.5], "median_step_time": 0.01, "step_times": [0.5, 0.01, 0.01, 0.01, 0.01]},
        "culprit_trial": trial,
        "repro": {"code": REPRO, "entry": "repro.py", "files": ["repro.py"], "diff": "+x = 1\n"},
        "reproduction": {"reproduced": True, "detail": "the loss became non-finite at step 2"},
        "evidence": {"timing": {"ratio": 6.0, "p_value": 0.001}},
        **extra,
    }


# tensorflow/tensorflow's bug form (its labels as GitHub shows them), in order.
TF_FORM = (
    "Issue type",
    "Have you reproduced the bug with TensorFlow Nightly?",
    "Source",
    "TensorFlow version",
    "Custom code",
    "OS platform and distribution",
    "Mobile device",
    "Python version",
    "Bazel version",
    "GCC/compiler version",
    "CUDA/cuDNN version",
    "GPU model and memory",
    "Current behavior?",
    "Standalone code to reproduce the issue",
    "Relevant log output",
)
# GitHub renders these as shell (a code block of their own)
SHELL_FIELDS = frozenset({"Current behavior?", "Standalone code to reproduce the issue", "Relevant log output"})
KERAS_FORM = (
    "System information",
    "Describe the problem",
    "Describe the current behavior",
    "Describe the expected behavior",
    "Standalone code to reproduce the issue",
    "Source code / logs",
)


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of every ### section before the part beyond the form."""
    form = text.split("## Beyond the issue form")[0]
    parts = re.split(r"^### (.+)$", form, flags=re.MULTILINE)[1:]
    return [(parts[i], parts[i + 1].strip()) for i in range(0, len(parts), 2)]


@pytest.mark.parametrize("symptom", ["nan", "slowdown", "crash"])
def test_issue_fills_tensorflows_form_in_order_with_plain_shell_fields(symptom):
    text = render_issue(Report.of(doc(symptom)))
    got = sections(text)
    assert [h for h, _ in got] == list(TF_FORM)
    fields = dict(got)
    for name in SHELL_FIELDS:
        assert "```" not in fields[name], f"{name} is rendered as shell by GitHub: no fences"
    assert fields["Standalone code to reproduce the issue"] == REPRO.strip()
    assert "Expected: " in fields["Current behavior?"]  # one field says both
    assert "Expected behavior" not in text
    assert fields["Source"] == "binary"
    assert fields["Issue type"] == ("Performance" if symptom == "slowdown" else "Bug")
    assert fields["Custom code"] == "Yes"
    assert "tensorflow/tensorflow/issues/new" in text


def test_symptom_specific_words_land_in_their_fields():
    nan = dict(sections(render_issue(Report.of(doc("nan")))))
    assert "the training loss becomes NaN/Inf at step 2" in nan["Current behavior?"]
    assert "Expected: The loss stays finite" in nan["Current behavior?"]
    slow = dict(sections(render_issue(Report.of(doc("slowdown")))))
    assert "60.00 ms against 10.00 ms" in slow["Current behavior?"] and "6x" in slow["Current behavior?"]
    assert "step time, ms (culprit configuration): 500, 60, 60" in slow["Relevant log output"]
    crash = dict(sections(render_issue(Report.of(doc("crash")))))
    assert crash["Relevant log output"].startswith("Traceback (most recent call last):")
    assert "`" not in crash["Current behavior?"]


def test_environment_fields_show_driver_cuda_wheels_and_library_path():
    fields = dict(sections(render_issue(Report.of(doc("nan")))))
    assert fields["GPU model and memory"] == (
        "NVIDIA A100-SXM4-40GB, 40960 MiB (compute capability 8.0); NVIDIA driver 550.54.15"
    )
    cuda = fields["CUDA/cuDNN version"]
    assert cuda.startswith("CUDA 12.5.1 / cuDNN 9 (build info)")
    assert "nvidia-cudnn-cu12 9.3.0.75" in cuda and "LD_LIBRARY_PATH=/usr/local/cuda/lib64" in cuda
    assert fields["Bazel version"] == "n/a (binary install)"


def test_nightly_is_answered_from_data_or_said_untried():
    untried = dict(sections(render_issue(Report.of(doc("nan")))))[
        "Have you reproduced the bug with TensorFlow Nightly?"
    ]
    assert untried.startswith("No: not tried on the nightly build") and "pip install tf-nightly" in untried
    assert "Not checked" not in untried
    tried = doc("nan", nightly={"version": "2.22.0.dev20261101", "reproduced": True})
    assert dict(sections(render_issue(Report.of(tried))))["Have you reproduced the bug with TensorFlow Nightly?"] == (
        "Yes: the symptom shows on 2.22.0.dev20261101 too."
    )
    fixed = doc("nan", nightly={"version": "2.22.0.dev20261101", "reproduced": False})
    assert (
        "does not show"
        in dict(sections(render_issue(Report.of(fixed))))["Have you reproduced the bug with TensorFlow Nightly?"]
    )


def test_a_source_build_says_source():
    env = {**ENV, "tf_dist": {"name": "tensorflow", "version": "2.21.0", "source": "source (editable install)"}}
    assert dict(sections(render_issue(Report.of(doc("nan", environment=env)))))["Source"] == "source"


def keras_crash(package: str) -> dict:
    frame = f'  File "/venv/lib/python3.11/site-packages/{package}/src/layers/core/dense.py", line 9, in call\n'
    d = doc("crash")
    d["culprit_trial"]["extra"]["error_detail"] = TRACEBACK.replace("ValueError", frame + "ValueError", 1)
    return d


def test_routing_reads_the_evidence():
    def route_of(d: dict):
        return route(Report.of(d))

    assert route_of(doc("nan")).repo == TENSORFLOW
    assert route_of(doc("crash")).repo == TENSORFLOW  # innermost frame in tensorflow
    assert route_of(keras_crash("keras")).repo == KERAS
    assert route_of(keras_crash("tf_keras")).repo == TF_KERAS
    assert route_of(doc("nan", follows="keras")).repo == KERAS
    assert route_of(keras_crash("keras") | {"follows": "tensorflow"}).repo == TENSORFLOW  # a version bisect wins
    legacy_on = doc("nan", repro={"diff": '+os.environ["TF_USE_LEGACY_KERAS"] = "1"\n+import tf_keras\n'})
    assert route_of(legacy_on).repo == TF_KERAS
    legacy_off = doc("nan", repro={"diff": '-os.environ["TF_USE_LEGACY_KERAS"] = "1"\n'})
    assert route_of(legacy_off).repo == KERAS


def test_routing_reads_tf_keras_on_any_added_line_as_the_setup_scan_does():
    """An `import tf_keras` the culprit adds after another line routes to
    tf-keras (route.py read only the diff's first added line); the words in a
    string or a comment do not."""

    def repo(diff: str) -> str:
        return route(Report.of(doc("nan", repro={"diff": diff}))).repo

    assert repo("+import numpy as np\n+import tf_keras\n") == TF_KERAS
    assert repo("+x = 1\n+from tf_keras import layers\n") == TF_KERAS
    assert repo('+print("import tf_keras")\n+x = 1  # import tf_keras\n') == TENSORFLOW
    assert repo('+# os.environ["TF_USE_LEGACY_KERAS"] = "1"\n') == TENSORFLOW  # commented out, as the scan reads it


def test_a_keras_bug_gets_the_keras_form():
    text = render_issue(Report.of(keras_crash("keras")))
    assert [h for h, _ in sections(text)] == list(KERAS_FORM)
    assert "keras-team/keras/issues/new" in text and "inside the `keras` package" in text
    fields = dict(sections(text))
    assert "- Keras version: 3.12.0" in fields["System information"]
    assert fields["Standalone code to reproduce the issue"].startswith("```python\n")  # a markdown template
    assert "Have you reproduced the bug with TensorFlow Nightly?" not in text


def test_a_found_localisation_is_stated_and_its_excerpt_logged():
    loc = {"found": True, "op_type": "Exp", "layer": "custom_norm", "file": "repro.py", "line": 9, "kind": "+Inf"}
    loc |= {"code": "e = tf.exp(x * 20.0)", "excerpt": 'Detected Infinity or NaN in output 0 of graph op "Exp"'}
    text = render_issue(Report.of(doc("nan", localization=loc)))
    assert 'Detected Infinity or NaN in output 0 of graph op "Exp"' in dict(sections(text))["Relevant log output"]
    assert "produced by op `Exp` in layer `custom_norm` at repro.py:9." in text
    assert "repro.py:9: e = tf.exp(x * 20.0)" in text


def test_a_document_without_symptom_settings_states_the_default_tolerance():
    from tfrepro.report.issue_text import behaviour

    r = Report.of({"symptom": "mismatch", "culprit_trial": {"losses": [1.0, 2.0]}, "baseline": {"losses": [1.0, 1.0]}})
    assert "(tolerance 0.05 relative)" in behaviour(r)[0]  # the [symptoms] default, as the loop table uses


def test_the_title_names_the_tensorflow_version_the_form_names():
    """An environment whose TensorFlow did not say its version (its import
    failed) but whose distribution did: the title says the version the form's
    field says, never "TF ?"."""
    env = {k: v for k, v in ENV.items() if k != "tf_version"}
    text = render_issue(Report.of(doc("nan", environment=env)))
    assert text.splitlines()[0].endswith("(TensorFlow 2.21.0)")
    assert dict(sections(text))["TensorFlow version"] == "2.21.0"


@pytest.mark.parametrize("symptom", ["mismatch", "slowdown"])
def test_the_issue_names_the_reference_where_the_bundle_put_it(symptom):
    """A multi-file reference lies in reference/ (export.Export.ref_path):
    ISSUE.md names that file, never a reference.py the bundle does not have."""
    from tfrepro.report.issue_text import behaviour, series_log

    repro = {"code": REPRO, "entry": "repro.py", "reference": "reference/repro.py"}
    r = Report.of(
        {
            "symptom": symptom,
            "culprit_trial": {"losses": [1.0, 2.0], "step_times": [0.5, 0.06, 0.06]},
            "baseline": {"losses": [1.0, 1.0], "step_times": [0.5, 0.01, 0.01]},
            "repro": repro,
            "reproduction": {"timing": {"candidate": [0.06], "baseline": [0.01]}},
        }
    )
    text = " ".join([*behaviour(r), *series_log(r)])
    assert "reference/repro.py" in text and "reference.py" not in text.replace("reference/repro.py", "")
