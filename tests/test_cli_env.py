"""`tfrepro env` and `tfrepro --version`."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest
from click.testing import CliRunner

from tfrepro import __version__
from tfrepro.cli import main
from tfrepro.report import envreport
from tfrepro.report.answer import Env, of

FACTS = {
    "python": "3.11.7",
    "os": "Debian GNU/Linux 12 (bookworm)",
    "tf_dist": {"name": "tensorflow", "version": "2.21.0"},
    "tf_version": "2.21.0",
    "keras_version": "3.15.1",
    "tf_keras_dist": {"name": "tf_keras", "version": "2.21.0"},
    "numpy_dist": {"name": "numpy", "version": "2.4.6"},
    "devices": [{"name": "/physical_device:CPU:0", "type": "CPU"}],
    "gpus": [],
    "runtime": {
        "precision_policy": "mixed_float16",
        "xla_jit": "off",
        "op_determinism": False,
        "tensor_float_32": True,
    },
}
ENVIRON = {
    "HOME": "/home/ada",
    "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
    "CUDA_VISIBLE_DEVICES": "0",
    "TF_GCS_TOKEN": "abc123456789xyz",
    "KERAS_HOME": "/home/ada/.keras",
    "HF_TOKEN": "hf_AbCdEfGhIjKlMnOp12",
    "TF_VAR_region": "eu",
    "PATH": "/usr/bin",
}


def test_env_doc_versions_settings_and_redacted_variables():
    doc = envreport.env_doc(of(Env, FACTS), ENVIRON)
    assert doc["versions"] == {
        "tfrepro": __version__,
        "python": "3.11.7",
        "tensorflow": "2.21.0",
        "keras": "3.15.1",
        "tf_keras": "2.21.0",
        "numpy": "2.4.6",
    }
    assert doc["precision_policy"] == "mixed_float16"
    assert doc["xla"] == {"jit": "off", "TF_XLA_FLAGS": "--tf_xla_auto_jit=2", "XLA_FLAGS": None}
    # Terraform's TF_VAR_ is no TensorFlow variable; PATH and HF_TOKEN are not listed at all.
    assert doc["env"] == {
        "CUDA_VISIBLE_DEVICES": "0",
        "KERAS_HOME": "~/.keras",
        "TF_GCS_TOKEN": "<redacted>",
        "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
    }
    assert doc["withheld_env"] == 2
    assert "abc123456789xyz" not in json.dumps(doc) and "hf_AbCd" not in json.dumps(doc)


def test_env_text_and_json(monkeypatch):
    monkeypatch.setattr(envreport, "collect", lambda **kw: dict(FACTS))
    for k in list(envreport.os.environ):
        if envreport.scrub.is_allowed_env(k) or k.startswith("CUDA_") or k in envreport.DETERMINISM_VARS:
            monkeypatch.delenv(k)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    r = CliRunner().invoke(main, ["env"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[:10] == [
        f"tfrepro     {__version__}",
        "Python      3.11.7",
        "TensorFlow  2.21.0",
        "Keras       3.15.1",
        "tf_keras    2.21.0",
        "NumPy       2.4.6",
        "devices     /physical_device:CPU:0 (CPU)",
        "precision   mixed_float16",
        "XLA         tf.config jit off; TF_XLA_FLAGS=(unset); XLA_FLAGS=--xla_gpu_autotune_level=0",
        "determinism op determinism False; TF32 True; TF_DETERMINISTIC_OPS=(unset); "
        "TF_CUDNN_DETERMINISTIC=(unset); PYTHONHASHSEED=(unset)",
    ]
    r = CliRunner().invoke(main, ["env", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["env"] == {"XLA_FLAGS": "--xla_gpu_autotune_level=0"}
    assert doc["versions"]["tensorflow"] == "2.21.0"


def test_env_probe_failure_is_stated_not_raised(monkeypatch):
    monkeypatch.setattr(envreport, "collect", lambda **kw: {"python": "3.11.7", "probe_error": "boom"})
    r = CliRunner().invoke(main, ["env", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["probe_error"] == "boom" and doc["versions"]["tensorflow"] is None


@pytest.mark.e2e
def test_env_real_child_process():
    out = subprocess.run(
        [sys.executable, "-m", "tfrepro", "env", "--json"], capture_output=True, text=True, check=True, timeout=300
    )
    doc = json.loads(out.stdout)
    assert doc["versions"]["tensorflow"] == metadata.version("tensorflow")
    assert doc["precision_policy"] == "float32" and doc["determinism"]["op_determinism"] is False
    assert any(d["type"] == "CPU" for d in doc["devices"])


def test_version_names_tensorflow_and_keras_without_importing_them():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom tfrepro.cli import main\n"
        "r = CliRunner().invoke(main, ['--version'])\n"
        "print(r.output.strip()); print([m for m in ('tensorflow', 'keras') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line, imported = out.stdout.splitlines()
    assert line == (
        f"tfrepro {__version__} (TensorFlow {metadata.version('tensorflow')}, "
        f"Keras {metadata.version('keras')}, tf_keras {metadata.version('tf_keras')})"
    )
    assert imported == "[]"


_RUNTIME_OF = """
import json, sys
from types import SimpleNamespace

sys.modules["tensorflow"] = sys.modules["keras"] = None  # neither is there to import: only what `tf` hands over
sys.path.insert(0, sys.argv[1])
import envprobe


class Unloadable:  # tf.keras where its Keras cannot be imported (TensorFlow's lazy loader raises)
    def __getattr__(self, name):
        raise ImportError(name)


policy = SimpleNamespace(global_policy=lambda: SimpleNamespace(name="mixed_bfloat16"))
for keras in (SimpleNamespace(mixed_precision=policy), Unloadable()):
    print(json.dumps(envprobe.runtime(SimpleNamespace(keras=keras))["precision_policy"]))
"""


def test_the_runtime_probe_reads_the_policy_of_the_keras_tf_keras_is():
    """`tfrepro env`'s precision policy is that of the Keras `tf.keras` is
    (tf_keras under TF_USE_LEGACY_KERAS=1), read by devices.precision_policy
    as a trial reads it; one that cannot load says `unavailable: <type>`.
    Before: the probe imported Keras 3 (`import keras`) whatever tf.keras was."""
    from tfrepro.inside import INSIDE_DIR

    out = subprocess.run([sys.executable, "-c", _RUNTIME_OF, str(INSIDE_DIR)], capture_output=True, text=True)
    assert out.stdout.splitlines() == ['"mixed_bfloat16"', '"unavailable: ImportError"'], out.stderr
