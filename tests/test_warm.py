"""Warm trials (a child forked from a warm server) against cold ones, on real processes.

Fork-path tests use a server that preloads nothing and small plain-Python
scripts: the same script runs warm and cold and must see the same world
(argv, cwd, sys.path, environment, exit codes, crash lines). The e2e tests
(real TensorFlow) prove the point of it all: the same seeded deterministic
trial gives bit-identical per-step losses and the same verdicts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from nspids import host_pids

from tfrepro.settings import TrialSettings
from tfrepro.trials import procs, warm
from tfrepro.trials.procs import TrialStopped, stop_trials, warm_argv
from tfrepro.trials.runner import run_variant
from tfrepro.trials.trial import TrialOptions

REPO = Path(__file__).resolve().parents[1]

WORLD = """\
import json, os, sys
world = {"argv": sys.argv, "orig_argv": sys.orig_argv, "cwd": os.getcwd(), "path": sys.path, "env": dict(os.environ),
         "name": __name__, "file": __file__, "main": sys.modules["__main__"].__dict__.get("__file__"),
         "stdin": sys.stdin.read()}
print(json.dumps(world))
print("step=1 loss=0.5")
"""

GROUP = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open("pids", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
print("step=1 loss=1.0", flush=True)
time.sleep(300)
"""


@pytest.fixture(scope="module")
def pool():
    p = warm.WarmPool(preload=(), only_tf_scripts=False)
    yield p
    p.close()


def script_dir(tmp_path: Path, text: str, name: str = "s.py") -> Path:
    d = tmp_path / "variant"
    d.mkdir(exist_ok=True)
    (d / name).write_text(textwrap.dedent(text))
    return d


def run(d: Path, tmp: Path, pool, *, cold: bool, args=(), timeout=30.0, env=None, tag=""):
    settings = TrialSettings(command=("python", "s.py", *args), steps=10, timeout_s=timeout)
    trial = tmp / f"trial-{'cold' if cold else 'warm'}{tag}"
    result = run_variant(d, settings, trial, TrialOptions(env=env, cold=cold), warm_pool=pool)
    return result, (trial / "stdout.log").read_text(), (trial / "stderr.log").read_text()


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie is gone for our purposes
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def all_gone(ns_pids, d: Path, within: float = 5.0) -> bool:
    """No process left of those the trial wrote down (pids of its own PID namespace)."""
    ns_pids = list(ns_pids)
    deadline = time.monotonic() + within
    while host_pids(ns_pids, d) and time.monotonic() < deadline:
        time.sleep(0.05)
    return host_pids(ns_pids, d) == []


# -- the same world, warm and cold ------------------------------------------------------


def private_tmps(tmp_path: Path, cold: dict, warm: dict) -> None:
    """Each trial's private TMPDIR lies in its own trial dir (then out of the comparison)."""
    for world, how in ((cold, "cold"), (warm, "warm")):
        tmps = {world["env"].pop(k) for k in ("TMPDIR", "TMP", "TEMP")}
        assert tmps == {str(tmp_path / f"trial-{how}" / "tmp")}


def test_warm_child_sees_what_a_cold_interpreter_sees(tmp_path, pool):
    d = script_dir(tmp_path, WORLD)
    cold, cold_out, _ = run(d, tmp_path, pool, cold=True, args=("--flag", "x y"), env={"MY_VAR": "1"})
    hot, hot_out, _ = run(d, tmp_path, pool, cold=False, args=("--flag", "x y"), env={"MY_VAR": "1"})
    assert (cold.extra["process"], hot.extra["process"]) == ("cold", "warm")
    a, b = json.loads(cold_out.splitlines()[0]), json.loads(hot_out.splitlines()[0])
    assert b["argv"] == ["s.py", "--flag", "x y"]
    assert b["cwd"] == str(d) and b["path"][0] == str(d)
    assert b["env"]["MY_VAR"] == "1" and "TFREPRO_TRIAL_CONFIG" not in b["env"]
    assert b["name"] == "__main__" and b["file"] == b["main"] == str(d / "s.py")
    private_tmps(tmp_path, a, b)
    assert a == b  # environment, sys.path, argv, cwd, stdin (empty): all of it
    assert cold.losses == hot.losses == (0.5,)


COMPILED_ONCE = """\
import json, sys
server = sys.modules.get("_tfrepro_warm")
compiled = getattr(server, "COMPILED", {})
def nested(code):
    out = {id(code)}
    for c in code.co_consts:
        if hasattr(c, "co_consts"):
            out |= nested(c)
    return out
used = {}
for name in ("_tfrepro_harness", "_tfrepro_harness_imports"):
    module = sys.modules[name]
    code = compiled.get(module.__file__)
    values = list(vars(module).values())
    values += [m for v in values if isinstance(v, type) and v.__module__ == name for m in vars(v).values()]
    funcs = [v.__code__ for v in values if getattr(v, "__module__", "") == name and hasattr(v, "__code__")]
    used[name] = code is not None and bool(funcs) and {id(f) for f in funcs} <= nested(code)
print(json.dumps(used))
print("step=1 loss=0.5")
"""


def test_a_warm_child_runs_the_harness_compiled_once_in_the_server(tmp_path, pool):
    """The harness and its siblings are compiled in the server, not in each
    child (no bytecode cache where PYTHONDONTWRITEBYTECODE is set): a warm
    child's harness functions are the server's code objects; a cold trial's
    are not. Fails when the child compiles its own."""
    d = script_dir(tmp_path, COMPILED_ONCE)
    cold, cold_out, _ = run(d, tmp_path, pool, cold=True)
    hot, hot_out, _ = run(d, tmp_path, pool, cold=False)
    assert (cold.extra["process"], hot.extra["process"]) == ("cold", "warm")
    assert json.loads(hot_out.splitlines()[0]) == {"_tfrepro_harness": True, "_tfrepro_harness_imports": True}
    assert json.loads(cold_out.splitlines()[0]) == {"_tfrepro_harness": False, "_tfrepro_harness_imports": False}
    assert cold.losses == hot.losses == (0.5,)


def test_a_relative_pythonpath_entry_is_the_trials_cwd_not_the_servers(tmp_path, pool):
    """`PYTHONPATH=src tfrepro ...`: a cold interpreter makes `src` absolute
    against the trial's cwd (the variant, where the project's src/ is); the
    warm server had made it absolute against its own temp dir."""
    d = script_dir(tmp_path, "import helper\n" + WORLD)
    (d / "src").mkdir()
    (d / "src" / "helper.py").write_text("")
    env = {"PYTHONPATH": os.pathsep.join(["src", "."])}
    cold, cold_out, _ = run(d, tmp_path, pool, cold=True, env=env)
    hot, hot_out, hot_err = run(d, tmp_path, pool, cold=False, env=env)
    assert hot.extra["process"] == "warm" and not hot.crashed, hot_err
    a, b = json.loads(cold_out.splitlines()[0]), json.loads(hot_out.splitlines()[0])
    private_tmps(tmp_path, a, b)
    assert str(d / "src") in b["path"] and a == b


@pytest.mark.parametrize(
    "code, expect",
    [
        ("raise SystemExit(3)", 3),
        ("import sys; sys.exit()", 0),
        ("import sys; sys.exit('bye')", 1),
        ("import os; os._exit(5)", 5),
    ],
)
def test_exit_codes_are_those_of_a_real_interpreter(tmp_path, pool, code, expect):
    d = script_dir(tmp_path, f"print('step=1 loss=1.0')\n{code}\n")
    cold, _, cold_err = run(d, tmp_path, pool, cold=True)
    hot, _, hot_err = run(d, tmp_path, pool, cold=False)
    assert cold.exit_code == hot.exit_code == expect
    assert hot.extra["process"] == "warm"
    assert cold_err == hot_err
    assert (cold.crashed, cold.error) == (hot.crashed, hot.error)


def test_an_uncaught_exception_is_a_crash_with_the_same_line_and_traceback(tmp_path, pool):
    d = script_dir(tmp_path, "print('step=1 loss=1.0')\ndef f():\n    raise ValueError('bad\\nsecond line')\nf()\n")
    cold, _, cold_err = run(d, tmp_path, pool, cold=True)
    hot, _, hot_err = run(d, tmp_path, pool, cold=False)
    assert hot.crashed and hot.exit_code == 1 and hot.error == "ValueError: bad"
    assert (cold.error, cold.exit_code) == (hot.error, hot.exit_code)
    assert hot_err == cold_err  # the traceback starts at the script, nothing of ours in it
    assert "warm.py" not in hot_err


def test_threads_are_joined_and_atexit_runs_before_the_exit(tmp_path, pool):
    d = script_dir(
        tmp_path,
        """\
        import atexit, threading
        atexit.register(lambda: print("atexit ran", flush=True))
        def late():  # still running when the script's main code ends, whatever the load
            threading.main_thread().join()
            print("thread done", flush=True)
        threading.Thread(target=late).start()
        print("step=1 loss=1.0")
        """,
    )
    _, cold_out, _ = run(d, tmp_path, pool, cold=True)
    hot, hot_out, _ = run(d, tmp_path, pool, cold=False)
    assert hot.extra["process"] == "warm"
    assert hot_out == cold_out and hot_out.splitlines()[-2:] == ["thread done", "atexit ran"]


def test_a_timeout_kills_the_childs_whole_group(tmp_path, pool):
    d = script_dir(tmp_path, GROUP)
    result, _, _ = run(d, tmp_path, pool, cold=False, timeout=2.0)
    assert result.timed_out and result.extra["process"] == "warm"
    assert result.losses == (1.0,)  # what the timed-out trial got through is kept
    assert all_gone(map(int, (d / "pids").read_text().split()), d)


def stop_once_started(thread: threading.Thread, started: Path, within: float = 30.0) -> int:
    """`stop_trials` for `thread`'s trial once its script wrote `started`
    (and the trial is registered): how many it stopped."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if started.exists() and started.read_text():
            got = stop_trials({thread.ident})
            if got:
                return got
        time.sleep(0.02)
    return 0


def test_stop_trials_kills_a_running_warm_trial_which_raises(tmp_path, pool):
    d = script_dir(tmp_path, GROUP)
    raised: list[BaseException] = []

    def go():
        try:
            run(d, tmp_path, pool, cold=False, timeout=60)
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=go)
    t.start()
    assert stop_once_started(t, d / "pids") == 1
    t.join()  # unstopped, the trial would end at its 60 s timeout with a result, not raise
    assert len(raised) == 1 and isinstance(raised[0], TrialStopped)
    assert all_gone(map(int, (d / "pids").read_text().split()), d)


def test_a_dead_server_is_replaced_and_the_trial_still_runs(tmp_path):
    p = warm.WarmPool(preload=(), only_tf_scripts=False)
    try:
        d = script_dir(tmp_path, "print('step=1 loss=2.0')\n")
        first, _, _ = run(d, tmp_path, p, cold=False)
        (server,) = p._servers.values()
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait()
        again, _, _ = run(d, tmp_path, p, cold=False, tag="2")
        assert first.losses == again.losses == (2.0,)
        (new,) = p._servers.values()
        assert new.pid != server.pid and new.alive()
    finally:
        p.close()


def test_a_server_lost_while_its_child_runs_falls_back_to_cold(tmp_path):
    p = warm.WarmPool(preload=(), only_tf_scripts=False)
    try:
        # the first start (warm) waits to die with its server; the second (cold) goes on
        d = script_dir(
            tmp_path,
            "import glob, os, signal\nfirst = not glob.glob('started-*')\nopen('started-' + str(os.getpid()), 'w')\n"
            "if first:\n    signal.pause()\nprint('step=1 loss=3.0')\n",
        )

        def kill_server_once_started():
            deadline = time.monotonic() + 30
            while not list(d.glob("started-*")) and time.monotonic() < deadline:
                time.sleep(0.02)
            (server,) = p._servers.values()
            os.kill(server.pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_server_once_started)
        killer.start()
        result, _, _ = run(d, tmp_path, p, cold=False)
        killer.join()
        assert result.extra["process"] == "cold" and result.losses == (3.0,) and not result.crashed
        assert len(list(d.glob("started-*"))) == 2  # the warm child died with its server; a cold one ran
    finally:
        p.close()


def _server_process(pid: int) -> int:
    """The warm server's own process: `pid` itself, or (under bubblewrap
    confinement, trials/confine.py) the descendant of bwrap that runs it."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        for child in Path(f"/proc/{p}/task/{p}/children").read_text().split() if Path(f"/proc/{p}").exists() else []:
            todo.append(int(child))
    for p in seen:
        try:
            if b"_tfrepro_warm" in Path(f"/proc/{p}/cmdline").read_bytes():
                return p
        except OSError:
            pass
    return pid


def test_a_server_that_grew_threads_forks_no_more(tmp_path, monkeypatch):
    mods, drop = tmp_path / "mods", tmp_path / "drop"
    mods.mkdir()
    drop.mkdir()
    # The thread limit is the warm server's own rule, confinement or not: this
    # test watches the server's threads from outside, so it runs unconfined.
    from tfrepro.trials import confine

    monkeypatch.setenv("TFREPRO_CONFINE", "none")
    monkeypatch.setattr(confine, "UNCONFINED", True)
    grow = drop / "grow"
    (mods / "spawner.py").write_text(
        textwrap.dedent(f"""\
        import os, threading, time
        def later():  # a thread that starts another one when told to
            while not os.path.exists({str(grow)!r}):
                time.sleep(0.02)
            threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
            time.sleep(600)
        threading.Thread(target=later, daemon=True).start()
        """)
    )
    p = warm.WarmPool(preload=("spawner",), only_tf_scripts=False)
    try:
        d = script_dir(tmp_path, "print('step=1 loss=1.0')\n")
        env = {"PYTHONPATH": str(mods)}
        first, _, _ = run(d, tmp_path, p, cold=False, env=env)
        (server,) = p._servers.values()
        tasks = Path(f"/proc/{_server_process(server.pid)}/task")
        before = len(list(tasks.iterdir()))
        grow.touch()
        deadline = time.monotonic() + 30
        while len(list(tasks.iterdir())) <= before and time.monotonic() < deadline:  # the server grew a thread
            time.sleep(0.02)
        assert len(list(tasks.iterdir())) > before
        second, _, _ = run(d, tmp_path, p, cold=False, env=env, tag="2")
        assert first.extra["process"] == "warm"
        assert second.extra["process"] == "cold" and second.losses == (1.0,)
    finally:
        p.close()


def test_idle_servers_beyond_the_limit_are_ended_least_recently_used_first(tmp_path):
    p = warm.WarmPool(preload=(), only_tf_scripts=False, max_servers=2)
    try:
        d = script_dir(tmp_path, "print('step=1 loss=1.0')\n")
        for i in range(3):  # three import-time environments, one after the other
            r, _, _ = run(d, tmp_path, p, cold=False, env={"TF_FAKE_SETTING": str(i)}, tag=str(i))
            assert r.extra["process"] == "warm"
        assert len(p._servers) == 2
        assert sorted(dict(k[2])["TF_FAKE_SETTING"] for k in p._servers) == ["1", "2"]
    finally:
        p.close()


FAKE_TF = """\
import random

random.random()  # an import that draws: the state it leaves must not matter
class random_ns:
    @staticmethod
    def set_seed(seed):
        pass
class config:
    class experimental:
        @staticmethod
        def enable_op_determinism():
            pass
random = random_ns
"""

SEEDS_FIRST = """\
import random
import sys

print("tensorflow" in sys.modules and "warm" or "cold", file=sys.stderr)
random.seed(1337)  # "for reproducibility", before the TensorFlow import (old Keras examples do)
draws = [random.random()]
import tensorflow  # noqa: E402  the trial's seed replaces the script's here, in a cold process
draws += [random.random(), random.random()]
for i, x in enumerate(draws, 1):
    print(f"step={i} loss={x!r}")
"""


@pytest.fixture(scope="module")
def fake_tf(tmp_path_factory):
    """A server that preloaded a stand-in `tensorflow` (fast), and the env that finds it."""
    mods = tmp_path_factory.mktemp("mods")
    (mods / "tensorflow.py").write_text(FAKE_TF)
    p = warm.WarmPool(preload=("tensorflow",), only_tf_scripts=False)
    yield p, {"PYTHONPATH": str(mods)}
    p.close()


def test_the_trials_seeds_come_at_the_scripts_first_tensorflow_import_warm_as_cold(tmp_path, fake_tf):
    """A cold trial seeds at the script's `import tensorflow`, replacing a seed
    the script set before it; a warm child, whose server imported TensorFlow
    already, must not seed before the script instead (it did: the script's
    seed won, and warm and cold losses differed). A stand-in `tensorflow`
    keeps this fast; the journey and example e2e tests run the real one."""
    p, env = fake_tf
    d = script_dir(tmp_path, SEEDS_FIRST)
    runs = {}
    for cold in (True, False):
        settings = TrialSettings(command=("python", "s.py"), steps=5, timeout_s=30, seed=0, deterministic=True)
        trial = tmp_path / f"trial-{cold}"
        runs[cold] = run_variant(d, settings, trial, TrialOptions(env=env, cold=cold), warm_pool=p)
        assert (trial / "stderr.log").read_text().split()[0] == ("cold" if cold else "warm")
    cold, hot = runs[True], runs[False]
    assert hot.extra["process"] == "warm" and not hot.crashed and len(hot.losses) == 3
    import random

    random.seed(1337)
    first = random.random()
    random.seed(0)
    assert cold.losses == (first, random.random(), random.random())  # the trial's seed 0 after the import
    assert hot.losses == cold.losses


def test_a_failed_import_before_tensorflow_shows_the_same_traceback_warm_and_cold(tmp_path, fake_tf):
    """Until the script imports TensorFlow, a warm child's imports pass through
    the harness (to run its hooks there): none of it in the traceback."""
    p, env = fake_tf
    d = script_dir(tmp_path, "print('step=1 loss=1.0')\nimport no_such_module_here\nimport tensorflow\n")
    cold, _, cold_err = run(d, tmp_path, p, cold=True, env=env)
    hot, _, hot_err = run(d, tmp_path, p, cold=False, env=env)
    assert hot.extra["process"] == "warm" and hot.error == "ModuleNotFoundError: No module named 'no_such_module_here'"
    assert (cold.crashed, cold.error) == (hot.crashed, hot.error)
    assert hot_err == cold_err and "harness" not in hot_err


# -- which trials go warm, and with which server ---------------------------------------


def test_only_a_plain_python_script_goes_warm():
    py = sys.executable
    assert warm_argv([py, "repro.py", "--fast"]) == ["repro.py", "--fast"]
    assert warm_argv([py, "-m", "train"]) is None
    assert warm_argv([py, "-u", "repro.py"]) is None
    assert warm_argv(["bash", "-c", "python repro.py"]) is None
    assert warm_argv(["/other/python", "repro.py"]) is None
    assert warm_argv(["/other/python", "repro.py"], "/other/python") == ["repro.py"]  # a version environment


def test_the_runner_offers_the_pool_to_a_python_command_only(tmp_path, monkeypatch):
    """A `[trial] command` naming its own interpreter keeps its warm server
    (the pool keys servers by interpreter); another program runs cold at
    once, with no warm server started for it."""
    from tfrepro.trials import runner

    offered = []

    class Spawned(Exception):
        pass

    def fake_spawn(cmd, cwd, env, timeout, trial_dir, pool):
        offered.append(pool is not None)
        raise Spawned

    monkeypatch.setattr(runner, "spawn", fake_spawn)
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "repro.py").write_text("pass\n")
    commands = [
        (sys.executable, "repro.py"),
        ("python3", "repro.py"),  # this interpreter
        ("/opt/conda/bin/python3.11", "repro.py"),  # its own, warm server of its own
        ("mytool", "repro.py"),  # not Python
        (sys.executable, "-m", "repro"),
    ]
    for i, cmd in enumerate(commands):
        with pytest.raises(Spawned):
            run_variant(tmp_path / "v", TrialSettings(command=cmd), tmp_path / f"t{i}", warm_pool=warm.WarmPool())
    assert offered == [True, True, True, False, False]


def test_the_default_pool_keeps_scripts_without_tensorflow_or_setting_its_variables_cold(tmp_path):
    p = warm.WarmPool()
    plain = tmp_path / "plain.py"
    plain.write_text("print('step=1 loss=1')\n")
    assert p.wants(plain) == "imports no TensorFlow/Keras"
    tf_script = tmp_path / "tf.py"
    tf_script.write_text("import os\nX = os.environ.get('TF_USE_LEGACY_KERAS')\nimport tensorflow as tf\n")
    assert p.wants(tf_script) is None
    legacy = tmp_path / "legacy.py"
    legacy.write_text("import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow as tf\n")
    assert p.wants(legacy) == "sets an import-time variable itself"
    via_module = tmp_path / "sub"
    via_module.mkdir()
    (via_module / "repro.py").write_text("from model import build\n")
    (via_module / "model.py").write_text("import keras\n")
    assert p.wants(via_module / "repro.py") is None


def test_a_local_module_shadowing_one_the_server_imported_runs_cold(tmp_path, pool):
    d = script_dir(tmp_path, "import selectors\nprint(selectors.MARK)\nprint('step=1 loss=1.0')\n")
    (d / "selectors.py").write_text("MARK = 'local selectors'\n")  # the server imported the stdlib one
    result, out, _ = run(d, tmp_path, pool, cold=False)
    assert result.extra["process"] == "cold" and out.startswith("local selectors")


def test_the_server_key_holds_import_time_variables_but_not_the_pinned_device():
    base = {"HOME": "/h", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "0"}
    key = warm.server_key("py", base, ())
    assert key == warm.server_key("py", {**base, "CUDA_VISIBLE_DEVICES": "1", "HOME": "/x", "N": "4"}, ())
    for name, value in [
        ("PYTHONHASHSEED", "1"),
        ("TF_USE_LEGACY_KERAS", "1"),
        ("KERAS_BACKEND", "jax"),
        ("XLA_FLAGS", "--x"),
        ("OMP_NUM_THREADS", "1"),
        ("TF_ENABLE_ONEDNN_OPTS", "0"),
        ("LD_PRELOAD", "libtcmalloc.so"),
    ]:
        assert warm.server_key("py", {**base, name: value}, ()) != key, name
    assert warm.server_key("other-python", base, ()) != key


def test_a_deterministic_trial_gets_a_server_started_with_its_hash_seed(tmp_path, pool):
    d = script_dir(
        tmp_path, "import sys, os\nprint(hash('abc'), os.environ['PYTHONHASHSEED'])\nprint('step=1 loss=1.0')\n"
    )
    outs = []
    for seed in (0, 1):
        settings = TrialSettings(command=("python", "s.py"), steps=5, timeout_s=30, seed=seed)
        for cold in (True, False):
            trial = tmp_path / f"t{seed}{cold}"
            r = run_variant(d, settings, trial, TrialOptions(cold=cold), warm_pool=pool)
            assert r.extra["process"] == ("cold" if cold else "warm")
            outs.append((trial / "stdout.log").read_text().splitlines()[0])
    assert outs[0] == outs[1] and outs[2] == outs[3] and outs[0] != outs[2]


# -- real TensorFlow: the same bytes out ------------------------------------------------


def _tf_trial(project: Path, tmp: Path, *, cold: bool, tag: str, steps: int = 20, pool=None, all_on=False):
    from tfrepro.project import Project

    proj = Project.load(project)
    settings = TrialSettings(entry=proj.manifest.trial.entry, steps=steps, timeout_s=300, seed=0, deterministic=True)
    variant = tmp / f"variant-{tag}"
    proj.write_variant(proj.feature_names if all_on else (), variant)
    return run_variant(variant, settings, tmp / f"trial-{tag}", TrialOptions(cold=cold), warm_pool=pool)


@pytest.mark.e2e
def test_tensorflow_fit_warm_and_cold_give_bit_identical_losses_and_verdicts(tmp_path):
    from tfrepro.settings import SymptomSettings
    from tfrepro.trials import classify

    pool = warm.WarmPool()
    try:
        runs = {}
        for tag, cold in [("cold", True), ("warm", False), ("warm2", False)]:
            # every feature ON: the script as written (with its own per-step loss callback)
            runs[tag] = _tf_trial(
                REPO / "tests" / "projects" / "fit_basic", tmp_path, cold=cold, tag=tag, pool=pool, all_on=True
            )
        assert [runs[t].extra["process"] for t in runs] == ["cold", "warm", "warm"]
        assert runs["cold"].losses and not runs["cold"].crashed
        assert runs["cold"].losses == runs["warm"].losses == runs["warm2"].losses  # bit-identical floats
        assert runs["cold"].weights_finite is runs["warm"].weights_finite is True
        own = [(tmp_path / f"variant-{t}" / "own_losses.txt").read_text() for t in runs]
        assert own[0] == own[1] == own[2]
        sym = SymptomSettings()
        for a, b in [("warm", "cold"), ("cold", "warm"), ("warm2", "cold")]:
            assert classify.symptoms(runs[a], reference=runs[b], settings=sym) == frozenset()
        assert classify.primary(classify.symptoms(runs["warm"], reference=None, settings=sym)) == classify.primary(
            classify.symptoms(runs["cold"], reference=None, settings=sym)
        )
    finally:
        pool.close()


@pytest.mark.e2e
@pytest.mark.parametrize("example", ["demo", "loop_missing_training"])
def test_bundled_examples_warm_equal_cold(tmp_path, example):
    pool = warm.WarmPool()
    try:
        cold = _tf_trial(REPO / "tfrepro" / "examples" / example, tmp_path, cold=True, tag="cold", pool=pool)
        hot = _tf_trial(REPO / "tfrepro" / "examples" / example, tmp_path, cold=False, tag="warm", pool=pool)
        assert hot.extra["process"] == "warm"
        assert [x.hex() if x == x else "nan" for x in cold.losses] == [x.hex() if x == x else "nan" for x in hot.losses]
        assert (cold.crashed, cold.error) == (hot.crashed, hot.error)
        assert cold.first_nonfinite_step == hot.first_nonfinite_step
    finally:
        pool.close()


def test_a_stopped_trial_is_an_interrupt_never_a_result(tmp_path, monkeypatch):
    """A trial killed by `stop_trials` raises TrialStopped (a KeyboardInterrupt)
    in its thread, and nothing is cached: the next run of it really runs."""
    from tfrepro.project import Project
    from tfrepro.trials.runner import run_trial

    root, drop = tmp_path / "p", tmp_path / "drop"
    started = drop / "started"
    root.mkdir()
    drop.mkdir()
    monkeypatch.setenv("TFREPRO_CONFINE_WRITABLE", str(drop))  # the confined trial really writes `started`
    (root / "repro.py").write_text(
        f"import os, signal\nif not os.path.exists({str(started)!r}):\n"
        f"    open({str(started)!r}, 'w').write('x')\n    signal.pause()\nprint('step=1 loss=1.0')\n"
    )
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 1\ntimeout_s = 60\n")
    project = Project.load(root)
    raised: list[BaseException] = []

    def go():
        try:
            run_trial(project, [], project.manifest.trial)
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=go)
    t.start()
    assert stop_once_started(t, started) == 1
    t.join()
    assert [type(e) for e in raised] == [procs.TrialStopped] and isinstance(raised[0], KeyboardInterrupt)
    again = run_trial(project, [], project.manifest.trial)
    assert not again.cached and not again.crashed and again.losses == (1.0,)


@pytest.mark.e2e
def test_cli_cold_flag_runs_the_trial_in_a_fresh_interpreter(tmp_path):
    """`tfrepro run --cold`: the same trial, started cold (the flag reaches the runner)."""
    import json
    import shutil
    import subprocess
    import sys

    root = tmp_path / "fit_basic"
    shutil.copytree(Path(__file__).parent / "projects" / "fit_basic", root)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    got = {}
    for flag in ([], ["--cold"]):
        proc = subprocess.run(
            [sys.executable, "-m", "tfrepro", "run", str(root), "--none", "--no-cache", "--json", *flag],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        got[bool(flag)] = json.loads(proc.stdout)
    assert got[False]["extra"]["process"] == "warm" and got[True]["extra"]["process"] == "cold"
    assert got[False]["losses"] == got[True]["losses"]
