"""--replicas N, what actually ran, and Ray's connection, with fakes (milliseconds).

The real thing (a custom loop and a fit under MirroredStrategy, in trial
processes) is tests/test_replicas_e2e.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tfrepro.bisect import result_doc
from tfrepro.errors import TfreproError, UserError
from tfrepro.inside import devices
from tfrepro.report.scan import with_split
from tfrepro.settings import TrialSettings
from tfrepro.trials.values import TrialResult

# -- settings and the manifest ------------------------------------------------------


def test_replicas_and_the_pin_enter_the_key_only_when_set():
    plain = TrialSettings().to_dict()
    assert "replicas" not in plain and "jit_auto" not in plain  # other trials' keys unchanged
    set_ = TrialSettings(replicas=2, jit_auto=False)
    assert set_.to_dict()["replicas"] == 2 and set_.to_dict()["jit_auto"] is False
    assert TrialSettings.from_dict(set_.to_dict()) == set_


@pytest.mark.parametrize("value", ["0", "65", "true", '"2"'])
def test_a_bad_replicas_value_names_the_line(tmp_path, value):
    from tfrepro.project import read_manifest

    (tmp_path / "tfrepro.toml").write_text(f"[trial]\nsteps = 5\nreplicas = {value}\n")
    with pytest.raises(UserError) as e:
        read_manifest(tmp_path)
    assert "replicas" in str(e.value) and e.value.line == 3


def test_replicas_from_the_manifest(tmp_path):
    from tfrepro.project import read_manifest

    (tmp_path / "tfrepro.toml").write_text("[trial]\nreplicas = 2\n")
    assert read_manifest(tmp_path)[1].trial.replicas == 2


# -- the split, inside the trial (a fake tf.config) ------------------------------------


class FakeConfig:
    def __init__(self, gpus: int, initialized: bool = False) -> None:
        self.gpus, self.initialized, self.calls = gpus, initialized, []
        self.LogicalDeviceConfiguration = lambda memory_limit=None: ("logical", memory_limit)

    def list_physical_devices(self, kind):
        return [f"{kind}:{i}" for i in range(self.gpus if kind == "GPU" else 1)]

    def set_logical_device_configuration(self, device, conf):
        if self.initialized:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.calls.append((device, conf))


def _split(gpus: int, n: int | None, **kw) -> tuple[FakeConfig, dict]:
    config, extra = FakeConfig(gpus, **kw), {}
    devices.split(SimpleNamespace(config=config), {"replicas": n}, extra)
    return config, extra


def test_the_cpu_is_split_into_n_logical_cpus():
    config, extra = _split(0, 3)
    assert config.calls == [("CPU:0", [("logical", None)] * 3)]
    assert extra["replica_devices"] == "the CPU split into 3 logical CPUs"


def test_one_gpu_is_split_with_a_memory_limit_each_and_memory_growth_ignored():
    config, extra = FakeConfig(1), {}
    config.experimental = SimpleNamespace(set_memory_growth=lambda d, e: pytest.fail("TF refuses it when split"))
    devices.split(SimpleNamespace(config=config), {"replicas": 2}, extra)
    assert config.calls == [("GPU:0", [("logical", devices.GPU_REPLICA_MB)] * 2)]
    config.experimental.set_memory_growth("GPU:0", True)  # the script's call: ignored, said so
    assert extra["warnings"] == [devices.MEMORY_GROWTH_IGNORED]


def test_n_real_gpus_are_used_as_they_are_and_no_replicas_splits_nothing():
    assert _split(4, 2)[0].calls == [] and "real GPUs" in _split(4, 2)[1]["replica_devices"]
    assert _split(0, None)[0].calls == [] and _split(0, 1)[0].calls == []


def test_a_split_too_late_is_a_warning_not_a_crash():
    _, extra = _split(0, 2, initialized=True)
    assert "already initialised" in extra["warnings"][0]


def test_the_replica_count_is_computed_once_for_the_result_the_hardware_and_the_plugins():
    """devices.replicas: the result's replicas_in_sync, the hardware's `replicas`
    and the plugins' ctx.replicas() (setup: with fits; localize: the
    strategies the script built alone) read this one count."""
    plain_fit = {"fits": [{"call": "fit#1", "replicas": 1}]}
    assert devices.replicas(plain_fit) == 1 and devices.replicas(plain_fit, fits=False) is None
    loop = {"strategies": [{"strategy": "MirroredStrategy", "replicas": 2, "devices": []}]}  # no fit
    assert devices.replicas(loop) == 2 == devices.replicas(loop, fits=False)
    both = {**plain_fit, **loop, "fits": [{"call": "fit#1", "replicas": 2}, {"call": "fit#2", "replicas": None}]}
    assert devices.replicas(both) == 2 and devices.replicas({}) is None
    assert devices.summary({**both, "strategies": loop["strategies"]}, None)["replicas_in_sync"] == 2
    assert devices.hardware(loop)["replicas"] == 2 and devices.hardware(plain_fit)["replicas"] == 1


def _keras(policy: str):
    return SimpleNamespace(mixed_precision=SimpleNamespace(global_policy=lambda: SimpleNamespace(name=policy)))


def test_the_precision_policy_and_jit_compile_are_read_one_way():
    """devices.precision_policy / the resolved jit_compile: each fit and the trial result
    read them alike (the report's setup and localisation take the trial's); the
    global policy is the script's Keras's (tf_keras's in a tf_keras trial),
    handed in, never imported."""
    tf_keras = _keras("mixed_float16")
    assert devices.precision_policy(tf_keras) == "mixed_float16" and devices.precision_policy(None) is None
    model = SimpleNamespace(dtype_policy=SimpleNamespace(name="mixed_bfloat16"))
    assert devices.precision_policy(tf_keras, model) == "mixed_bfloat16"  # the model's own comes first
    assert devices.summary({}, tf_keras)["precision_policy"] == "mixed_float16"
    extra: dict = {}
    devices.record_fit(SimpleNamespace(_jit_compile=None, jit_compile=True), extra, tf_keras)
    devices.record_fit(SimpleNamespace(_jit_compile=False, jit_compile=True), extra, tf_keras)
    assert [(f["jit_compile"], f["precision_policy"]) for f in extra["fits"]] == [
        (True, "mixed_float16"),
        (False, "mixed_float16"),
    ]

    def resolved(model):  # the jit_compile a fit of `model` records
        got: dict = {}
        devices.record_fit(model, got, tf_keras)
        return got["fits"][0]["jit_compile"]

    assert resolved(SimpleNamespace()) is None

    class Unresolvable:  # the property raises: the fit goes on, the mode is unknown
        _jit_compile = None

        @property
        def jit_compile(self):
            raise RuntimeError("cannot resolve")

    assert resolved(Unresolvable()) is None


# -- jit_compile="auto" pinned ------------------------------------------------------------


def test_auto_is_pinned_and_an_explicit_value_never_is():
    config = {"jit_auto": False}
    assert devices.pin_compile((), {"loss": "mse"}, config) == ({"loss": "mse", "jit_compile": False}, "auto", True)
    assert devices.pin_compile((), {"jit_compile": "auto"}, config)[0]["jit_compile"] is False
    assert devices.pin_compile((), {"jit_compile": True}, config) == ({"jit_compile": True}, True, False)
    assert devices.pin_compile((), {}, {"jit_auto": None}) == ({}, "auto", False)
    assert devices.pin_compile((), {"run_eagerly": True}, config)[2] is False
    assert devices.pin_compile(("sgd",) * 7 + (True,), {}, config)[1] is True


def _trial(enabled=(), compile_modes=(), strategies=None) -> TrialResult:
    return TrialResult(
        enabled=tuple(enabled),
        compile_modes=tuple(compile_modes),
        extra={"strategies": strategies} if strategies is not None else {},
    )


def _compile(jit, requested="auto", pinned=False) -> dict:
    return {"call": "compile#1", "requested": requested, "jit_compile": jit, "pinned": pinned}


def test_the_pin_is_what_auto_resolved_to_in_the_failing_configuration():
    # A GPU resolves "auto" to no XLA under MirroredStrategy, to XLA without one:
    # the failing configuration (strategy on) decides for every trial.
    failing = _trial(["mirrored_strategy"], [_compile(False)])
    assert result_doc.pin_for(failing) is False
    assert result_doc.pin_for(_trial(compile_modes=[_compile(True, requested=True)])) is None
    assert result_doc.pin_for(_trial()) is None
    baseline_before_pin = _trial([], [_compile(True)])
    assert result_doc.auto_differs(baseline_before_pin, False)  # runs again, pinned
    assert not result_doc.auto_differs(_trial([], [_compile(False, pinned=True)]), False)
    assert not result_doc.auto_differs(_trial([], [_compile(True, requested=True)]), False)


def test_a_trial_that_compiled_otherwise_is_named():
    failing = _trial(["mirrored_strategy", "xla"], [_compile(True, requested=True)])
    trials = [(("mirrored_strategy",), _trial(compile_modes=[_compile(False, requested=False)])), (("xla",), failing)]
    got = result_doc.differing(failing, trials)
    assert got == [{"configuration": ["mirrored_strategy"], "jit_compile": [False], "failing_jit_compile": [True]}]
    assert result_doc.differing(failing, [(("xla",), failing)]) == []


def test_the_one_replica_note():
    one = _trial(strategies=[{"strategy": "MirroredStrategy", "replicas": 1}])
    note = result_doc.one_replica_note(one, None)
    assert note.startswith("only one replica was available") and "--replicas 2" in note
    assert result_doc.one_replica_note(one, 2) is None  # asked for replicas: no advice
    assert (
        result_doc.one_replica_note(_trial(strategies=[{"strategy": "MirroredStrategy", "replicas": 2}]), None) is None
    )
    assert result_doc.one_replica_note(_trial(), None) is None
    assert (
        result_doc.one_replica_note(_trial(strategies=[{"strategy": "OneDeviceStrategy", "replicas": 1}]), None) is None
    )


def test_the_engine_pins_and_reruns_what_resolved_otherwise(tmp_path):
    """A fake runner whose "auto" resolves to XLA without the strategy, as
    Keras 3 does on a GPU: the pinned hunt runs every trial without XLA."""
    from tfrepro.bisect.engine import BisectOptions, bisect
    from tfrepro.project import Project

    (tmp_path / "repro.py").write_text(
        "s = 1\n# tfrepro: feature mirrored_strategy -- two replicas\n# s = 2\n# tfrepro: end\nprint(s)\n"
    )
    (tmp_path / "tfrepro.toml").write_text("[trial]\nsteps = 3\n")
    seen = []

    def runner(project, enabled, settings, **kw):
        pin = settings.jit_auto
        jit = pin if pin is not None else "mirrored_strategy" not in enabled
        seen.append((tuple(enabled), pin, jit))
        mode = {"call": "compile#1", "requested": "auto", "jit_compile": jit, "pinned": pin is not None}
        return TrialResult(
            losses=(1.0, 0.5, 0.25), step_times=(0.1,) * 3, mode="fit", steps_run=3, compile_modes=(mode,)
        )

    doc = bisect(Project.load(tmp_path), BisectOptions(), runner=runner).to_dict()
    assert doc["status"] == "none"
    assert doc["compile_differs"] == []
    ran = {r["key"] or i: r for i, r in enumerate(doc["trials_table"])}
    assert ran
    # every baseline that resolved to XLA before the pin was known ran again pinned
    assert [s for s in seen if s[1] is None and s[0] == ()]  # before the pin
    assert all(jit is False for _, pin, jit in seen if pin is not None)
    assert {pin for _, pin, _ in seen if pin is not None} == {False}


# -- the split in the report's repro.py ----------------------------------------------------


def test_the_split_goes_after_the_first_tensorflow_import():
    src = "import os\nos.environ['X'] = '1'\nimport numpy as np\nfrom tensorflow import (\n    keras,\n)\nx = 1\n"
    out = with_split(src, 2)
    lines = out.splitlines()
    at = lines.index("# Added by tfrepro (--replicas 2): the bug needs 2 replicas under a distribution")
    assert lines[:at] == src.splitlines()[:6] and lines[-1] == "x = 1"
    assert "range(2)" in out
    compile(out, "repro.py", "exec")
    assert with_split(src, None) == src and with_split(src, 1) == src
    top = with_split("#!/usr/bin/env python\nprint(1)\n", 3)
    assert top.startswith("#!/usr/bin/env python\n# Added by tfrepro (--replicas 3)")


def test_a_script_without_a_tensorflow_import_keeps_its_docstring_and_future_imports_first():
    # a Keras 3 script (`import keras`) with `from __future__ import annotations`:
    # the split before the __future__ import would be a SyntaxError in repro.py
    src = '"""Train."""\nfrom __future__ import annotations\n\nimport keras\nx = 1\n'
    out = with_split(src, 2)
    compile(out, "repro.py", "exec")
    assert out.startswith('"""Train."""\nfrom __future__ import annotations\n# Added by tfrepro (--replicas 2)')
    assert out.endswith("import keras\nx = 1\n")


# -- Ray: a private instance, or a bounded wait for a named address ------------------------------


@pytest.fixture
def ray_connect():
    """`ray_executor`'s connection half (it imports Ray; nothing here starts it)."""
    return pytest.importorskip("tfrepro.trials.ray_executor")


def test_no_address_starts_a_private_loopback_instance(ray_connect, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    calls, lines = [], []
    conn = ray_connect.connect(None, lines.append, init=lambda **kw: calls.append(kw))
    (kw,) = calls
    assert kw["address"] == "local"  # never the cluster a stale /tmp/ray/ray_current_cluster names
    assert kw["_node_ip_address"] == "127.0.0.1" and kw["include_dashboard"] is False
    assert kw["log_to_driver"] is False
    assert kw["_temp_dir"] == conn.temp_dir and conn.owns
    assert any("private local Ray instance" in line for line in lines)
    conn.close(lambda: None)
    assert not __import__("os").path.exists(kw["_temp_dir"])


def test_a_killed_drivers_private_ray_dir_is_swept_by_the_next_start(ray_connect, tmp_path, monkeypatch):
    """The private instance's temp dir has an owner (`state.owned`): a driver
    SIGKILLed with its Ray up leaves the dir behind only until the next
    private start, which never takes a live driver's."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def start():
        return ray_connect.connect(None, lambda line: None, init=lambda **kw: None)

    live = start()
    code = (
        "import os, signal; from tfrepro.trials import ray_executor as ray_connect\n"
        "c = ray_connect.connect(None, lambda line: None, init=lambda **kw: None)\n"
        "print(c.temp_dir, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"TMPDIR": str(tmp_path)}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert child.returncode == -signal.SIGKILL, child.stderr
    dead = Path(child.stdout.strip())
    assert dead.parent == tmp_path and dead.is_dir()
    after = start()
    assert not dead.exists() and Path(live.temp_dir).is_dir() and Path(after.temp_dir).is_dir()
    live.close(lambda: None), after.close(lambda: None)
    assert list(tmp_path.iterdir()) == []


def test_an_address_nobody_answers_at_is_named_at_once(ray_connect):
    def refuse(addr, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(UserError) as e:
        ray_connect.probe("127.0.0.1:1", 1.0, connect=refuse)
    assert "127.0.0.1:1" in str(e.value)
    with pytest.raises(UserError):
        ray_connect.host_port("auto")


def test_a_cluster_that_never_lets_us_join_times_out_naming_it(ray_connect, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(ray_connect, "probe", lambda address, timeout: None)
    lines: list[str] = []
    try:
        with pytest.raises(TfreproError) as e:
            ray_connect.connect(
                "10.9.8.7:6379", lines.append, init=lambda **kw: release.wait(), timeout_s=0.05, tick_s=0.01
            )
    finally:
        release.set()
    assert "10.9.8.7:6379" in str(e.value) and "did not let this process join" in str(e.value)
    assert lines[0] == "ray: joining the cluster at 10.9.8.7:6379"


def test_progress_is_printed_while_ray_starts(ray_connect):
    gate, ticks = threading.Event(), []

    def log(line):
        ticks.append(line)
        if len(ticks) >= 2:
            gate.set()  # Ray "comes up" once two progress lines were printed

    assert ray_connect._ticking(lambda: gate.wait() and "up", "starting", log, 0.001, timeout_s=600) == "up"
    assert len(ticks) >= 2 and all(t.startswith("ray: starting...") for t in ticks)
    # A private instance starts in the caller's own thread (Ray's processes die
    # with the thread that started them), with the same progress lines.
    gate.clear(), ticks.clear()
    main = threading.current_thread()

    def start():
        assert threading.current_thread() is main
        return gate.wait() and "up"

    assert ray_connect._ticking(start, "starting", log, 0.001) == "up"
    assert len(ticks) >= 2


# -- benchmarks/gpu_check.sh -----------------------------------------------------------------------

GPU_CHECK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"


def test_the_gpu_check_dry_run_lists_every_check_and_runs_nothing(tmp_path):
    out = subprocess.run(["bash", str(GPU_CHECK), "--dry-run"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    names = [line.split()[0] for line in out.stdout.splitlines()[1:]]
    assert names == ["gpus", "replicas", "nvml", "memory_growth", "mixed_precision", "xla"]
    # Without a GPU (no nvidia-smi on PATH) the real run says so and exits 2.
    bare = subprocess.run(
        [shutil.which("bash"), str(GPU_CHECK)], capture_output=True, text=True, timeout=30, env={"PATH": str(tmp_path)}
    )
    assert bare.returncode == 2 and "no NVIDIA GPU" in bare.stderr


def test_the_issue_says_replicas_and_a_trial_that_compiled_otherwise():
    from tfrepro.report.answer import Report
    from tfrepro.report.issue import bisect_evidence

    differs = [{"configuration": ["xla"], "jit_compile": [True], "failing_jit_compile": [False]}]
    text = "\n".join(
        bisect_evidence(Report.of({"status": "found", "evidence": {"replicas": 2, "compile_differs": differs}}))
    )
    assert "split into 2 logical devices" in text
    assert "`xla` compiled with jit_compile=[True], the failing configuration with [False]" in text
    assert "logical devices" not in "\n".join(bisect_evidence(Report.of({"status": "found", "evidence": {}})))
