"""The trial runner and the harness with real subprocesses, without TensorFlow.

Scripts here are plain Python (a custom loop printing `step=N loss=X`), so a
trial costs tens of milliseconds; the TensorFlow side is in
test_harness_e2e.py.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from nspids import host_pids

from tfrepro.cli import main
from tfrepro.project import Project
from tfrepro.settings import TrialSettings
from tfrepro.trials import runner
from tfrepro.trials.runner import run_trial, trial_key
from tfrepro.trials.trial import TrialOptions

FIXTURES = Path(__file__).parent / "projects"

LOOP = """\
import os, sys
n = int(os.environ.get("N", "20"))
counter = os.environ.get("COUNTER")
if counter:
    with open(counter, "a") as f:
        f.write("ran\\n")
print("argv", sys.argv[1:])
for i in range(1, n + 1):
    loss = 1.0 / i
    # tfrepro: feature blowup -- the loss turns NaN at step 3
    # if i == 3:
    #     loss = float("nan")
    # tfrepro: end
    print(f"step={i} loss={loss!r} lr=0.1")
print("finished all steps")
"""


def make_project(
    root: Path, script: str = LOOP, manifest: str = "[trial]\nsteps = 5\ntimeout_s = 30\n", name: str = "repro.py"
) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(textwrap.dedent(script))
    (root / "tfrepro.toml").write_text(manifest)
    return Project.load(root)


def settings_of(project: Project, **kw) -> TrialSettings:
    from dataclasses import replace

    return replace(project.manifest.trial, **kw)


def stdout_of(result) -> str:
    return (Path(result.log_dir) / "stdout.log").read_text()


def test_loop_lines_are_measured_and_the_run_stops_at_steps(tmp_path):
    p = make_project(tmp_path / "p")
    r = run_trial(p, [], settings_of(p))
    assert r.mode == "loop"
    assert r.losses == tuple(1.0 / i for i in range(1, 6))
    assert r.steps_run == 5 and len(r.step_times) == 5
    assert not r.crashed and r.exit_code == 0 and r.first_nonfinite_step is None
    out = stdout_of(r)
    assert "step=5 loss=0.2" in out and "step=6" not in out and "finished" not in out
    # the user's files are only read
    assert sorted(x.name for x in (tmp_path / "p").iterdir()) == [".tfrepro", "repro.py", "tfrepro.toml"]


def test_a_script_shorter_than_steps_ends_normally(tmp_path):
    p = make_project(tmp_path / "p")
    r = run_trial(p, [], settings_of(p, steps=50), TrialOptions(env={"N": "4"}))
    assert r.steps_run == 4 and r.extra["stop"] == "exit"
    assert "finished all steps" in stdout_of(r)


def test_the_first_nonfinite_loss_stops_the_run_and_says_where(tmp_path):
    p = make_project(tmp_path / "p")
    r = run_trial(p, ["blowup"], settings_of(p))
    assert r.first_nonfinite_step == 3 and r.steps_run == 3
    assert r.losses[:2] == (1.0, 0.5) and r.losses[2] != r.losses[2]
    assert r.nonfinite and not r.crashed
    assert "step=4" not in stdout_of(r)


def test_a_script_that_raises_is_a_crash_with_its_last_traceback_line(tmp_path):
    p = make_project(tmp_path / "p", "print('step=1 loss=0.5')\nraise ValueError('boom')\n")
    r = run_trial(p, [], settings_of(p))
    assert r.crashed and r.error == "ValueError: boom" and r.exit_code == 1
    assert r.losses == (0.5,)


def test_a_multiline_error_keeps_its_first_line_and_the_detail(tmp_path):
    script = "raise RuntimeError('Graph execution error:\\n\\nDetected at node x/PyFunc\\n  [[Op:f]]')\n"
    p = make_project(tmp_path / "p", script)
    r = run_trial(p, [], settings_of(p))
    assert r.crashed and r.error == "RuntimeError: Graph execution error:"
    assert "Detected at node x/PyFunc" in r.extra["error_detail"]


def test_a_process_that_dies_without_a_result_is_a_crash(tmp_path):
    script = "import os, sys\nsys.stderr.write('fatal: out of luck\\n'); sys.stderr.flush()\nos._exit(3)\n"
    p = make_project(tmp_path / "p", script)
    r = run_trial(p, [], settings_of(p))
    assert r.crashed and r.exit_code == 3 and r.error == "fatal: out of luck"


def test_sys_exit_nonzero_is_a_crash(tmp_path):
    p = make_project(tmp_path / "p", "import sys\nprint('step=1 loss=0.5')\nsys.exit('bad config')\n")
    r = run_trial(p, [], settings_of(p))
    assert r.crashed and r.exit_code == 1 and r.error == "bad config" and r.losses == (0.5,)


def _gone(pid: int, within: float = 5.0) -> bool:
    """True once the process no longer runs (gone, or a zombie awaiting its reaper)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def hang_project(tmp_path: Path, timeout: float = 1.0) -> Project:
    import shutil

    shutil.copytree(FIXTURES / "hang", tmp_path / "hang")
    (tmp_path / "hang" / "tfrepro.toml").write_text(f"[trial]\nsteps = 10\ntimeout_s = {timeout}\n")
    return Project.load(tmp_path / "hang")


def _gone_ns(pid: int, under: Path, within: float = 5.0) -> bool:
    """A pid the trial wrote down (in its own PID namespace, under overlay
    confinement) names no live process of it any more."""
    deadline = time.monotonic() + within
    while host_pids([pid], under) and time.monotonic() < deadline:
        time.sleep(0.05)
    return host_pids([pid], under) == []


def test_a_hang_is_killed_at_its_timeout_with_its_grandchild(tmp_path, monkeypatch):
    monkeypatch.setenv("TFREPRO_KEEP_VARIANTS", "1")  # the trial's copy holds the grandchild's pid
    p = hang_project(tmp_path)
    r = run_trial(p, [], p.manifest.trial)  # unkilled, the fixture would end on its own (600 s), not timed out
    assert r.timed_out and not r.crashed and r.exit_code is None
    # the steps seen before the hang are kept
    assert r.losses == (0.5,) and r.steps_run == 1 and r.error == "timed out after 1 s (last step seen: 1)"
    pid = int((Path(r.log_dir) / "variant" / "grandchild.pid").read_text())  # in its PID namespace
    deadline = time.monotonic() + 5
    while host_pids([pid], Path(r.log_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_pids([pid], Path(r.log_dir)) == []
    # a timeout is a result: cached
    assert run_trial(p, [], p.manifest.trial).cached


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs SIGALRM")
def test_an_interrupted_trial_kills_its_tree_and_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TFREPRO_KEEP_VARIANTS", "1")  # the trial's copy holds the grandchild's pid
    p = hang_project(tmp_path, timeout=60)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_trial(p, [], p.manifest.trial)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not list((p.root / ".tfrepro" / "cache").glob("*.json"))
    (trial_dir,) = (p.root / ".tfrepro" / "trials").iterdir()
    assert _gone_ns(int((trial_dir / "variant" / "grandchild.pid").read_text()), trial_dir)


def test_the_same_trial_asked_twice_runs_once_unless_no_cache(tmp_path, monkeypatch):
    p = make_project(tmp_path / "p")
    (tmp_path / "count").mkdir()
    monkeypatch.setenv("TFREPRO_CONFINE_WRITABLE", str(tmp_path / "count"))  # the trials write it for real
    counter = tmp_path / "count" / "counter"
    env = {"COUNTER": str(counter)}
    first = run_trial(p, [], settings_of(p), TrialOptions(env=env))
    second = run_trial(p, [], settings_of(p), TrialOptions(env=env, label="again"))
    assert not first.cached and second.cached
    assert second.losses == first.losses and second.key == first.key and second.label == "again"
    assert counter.read_text().count("ran") == 1
    third = run_trial(p, [], settings_of(p), TrialOptions(env=env, use_cache=False))
    assert not third.cached and counter.read_text().count("ran") == 2


def test_the_cache_key_follows_variant_settings_env_and_plugins(tmp_path):
    p = make_project(tmp_path / "p")
    s = settings_of(p)
    plugin = tmp_path / "plug.py"
    plugin.write_text("def install(ctx): pass\n")
    base = trial_key(p.variant_hash([]), s)
    assert base == trial_key(p.variant_hash([]), s)
    others = {
        trial_key(p.variant_hash(["blowup"]), s),
        trial_key(p.variant_hash([]), settings_of(p, steps=6)),
        trial_key(p.variant_hash([]), settings_of(p, repeat=1)),
        trial_key(p.variant_hash([]), s, TrialOptions(env={"X": "1"})),
        trial_key(p.variant_hash([]), s, TrialOptions(plugins=[plugin])),
        trial_key(p.variant_hash([]), s, TrialOptions(plugins=[plugin], plugin_options={"a": 1})),
    }
    assert base not in others and len(others) == 6
    with_plugin = trial_key(p.variant_hash([]), s, TrialOptions(plugins=[plugin]))
    plugin.write_text("def install(ctx): ctx.record('x', 1)\n")
    assert trial_key(p.variant_hash([]), s, TrialOptions(plugins=[plugin])) != with_plugin


def test_state_dir_elsewhere_leaves_the_project_untouched(tmp_path):
    p = make_project(tmp_path / "p")
    r = run_trial(p, [], settings_of(p), TrialOptions(state_dir=tmp_path / "state"))
    assert not (tmp_path / "p" / ".tfrepro").exists()
    assert Path(r.log_dir).parent == tmp_path / "state" / "trials"
    assert (tmp_path / "state" / "cache" / f"{r.key}.json").exists()


def test_a_command_with_arguments_runs_under_this_python(tmp_path):
    manifest = '[trial]\ncommand = ["python", "train.py", "--fast"]\nsteps = 2\n'
    p = make_project(tmp_path / "p", "import sys\nprint('exe', sys.executable)\n" + LOOP, manifest, name="train.py")
    r = run_trial(p, [], p.manifest.trial)
    assert r.losses == (1.0, 0.5)
    out = stdout_of(r)
    assert "argv ['--fast']" in out and f"exe {sys.executable}" in out


def test_processes_the_script_spawns_are_not_measured(tmp_path):
    script = """\
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "print('step=1 loss=9.0')"], check=True)
    print("step=1 loss=0.25")
    """
    p = make_project(tmp_path / "p", script)
    r = run_trial(p, [], settings_of(p))
    assert r.losses == (0.25,)


def test_a_forked_child_neither_counts_steps_nor_writes_the_result(tmp_path):
    script = """\
    import os
    pid = os.fork()
    if pid == 0:
        print("step=1 loss=9.0")  # would hit the 1-step cap and write a result
        os._exit(0)
    os.waitpid(pid, 0)
    os._exit(3)
    """
    p = make_project(tmp_path / "p", script, "[trial]\nsteps = 1\n")
    r = run_trial(p, [], p.manifest.trial)
    assert r.losses == () and r.crashed and r.exit_code == 3 and r.extra.get("no_result")


def test_seed_and_hash_seed_reach_the_script(tmp_path):
    script = "import os, random\nprint('hashseed', os.environ.get('PYTHONHASHSEED'), random.random())\n"
    p = make_project(tmp_path / "p", script, "[trial]\nseed = 7\n")
    a = stdout_of(run_trial(p, [], p.manifest.trial))
    b = stdout_of(run_trial(p, [], p.manifest.trial, TrialOptions(use_cache=False)))
    assert a == b and "hashseed 7 " in a


def test_plugins_install_record_and_end_hooks(tmp_path):
    plugin = tmp_path / "probe.py"
    plugin.write_text(
        textwrap.dedent("""\
        def install(ctx):
            ctx.record("probe_options", ctx.options)
            ctx.add_end_hook(lambda models: ctx.record("probe_end", len(models)))
            ctx.add_fit_hook(lambda model, args, kwargs: None)
        """)
    )
    broken = tmp_path / "broken.py"
    broken.write_text("def install(ctx):\n    raise RuntimeError('nope')\n")
    p = make_project(tmp_path / "p")
    r = run_trial(p, [], settings_of(p), TrialOptions(plugins=[plugin, broken], plugin_options={"level": 2}))
    assert r.extra["probe_options"] == {"level": 2}
    assert r.extra["probe_end"] == 0  # called after the step-cap stop; no Keras model here
    assert any("nope" in e for e in r.extra["harness_errors"])
    assert r.steps_run == 5 and not r.crashed


def test_concurrent_trials_get_their_own_dirs(tmp_path):
    p = make_project(tmp_path / "p")
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda i: run_trial(p, [], settings_of(p, repeat=i % 2), TrialOptions(use_cache=False)), range(4))
        )
    assert len({r.log_dir for r in results}) == 4
    assert all(r.losses == results[0].losses and not r.crashed for r in results)
    assert len(list((p.root / ".tfrepro" / "cache").glob("*.json"))) == 2


def test_a_user_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    p = make_project(
        tmp_path / "p",
        "import builtins\nprint('step=1 loss=', getattr(builtins, 'USER_SITE_RAN', 0))\nprint('step=2 loss=0.5')\n",
    )
    r = run_trial(p, [], settings_of(p), TrialOptions(env={"PYTHONPATH": str(site)}))
    assert "loss= True" in stdout_of(r) and r.losses == (0.5,)


def test_last_line_reads_only_the_tail(tmp_path):
    log = tmp_path / "err.log"
    log.write_text("x" * 200_000 + "\nTraceback...\nKeyError: 'a'\n\n  \n")
    assert runner.last_line(log) == "KeyError: 'a'"
    assert runner.last_line(tmp_path / "missing") is None


# -- the CLI ---------------------------------------------------------------------


def test_cli_run_prints_the_summary_and_json(tmp_path):
    make_project(tmp_path / "p")
    res = CliRunner().invoke(main, ["run", str(tmp_path / "p"), "--with", "blowup", "--steps", "10"])
    assert res.exit_code == 1, res.output  # a trial that went non-finite exits 1
    assert "features on: blowup" in res.stdout
    assert "loop: 3 steps; loss at step 1: 1, at step 3: nan" in res.stdout
    assert "first non-finite loss at step 3" in res.stdout
    res = CliRunner().invoke(main, ["run", str(tmp_path / "p"), "--with", "blowup", "--steps", "10", "--json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["cached"] is True and doc["first_nonfinite_step"] == 3 and doc["losses"] == [1.0, 0.5, None]
    assert doc["first_loss"] == 1.0 and doc["last_loss"] is None and doc["nonfinite"] is True
    res = CliRunner().invoke(main, ["run", str(tmp_path / "p"), "--none", "--json", "--no-cache", "--repeats", "2"])
    runs = json.loads(res.stdout)["repeats"]
    assert [r["cached"] for r in runs] == [False, False] and runs[0]["losses"] == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    assert runs[0]["median_step_time"] is not None


def test_cli_run_exit_codes(tmp_path):
    make_project(tmp_path / "p", "raise ValueError('boom')\n")
    res = CliRunner().invoke(main, ["run", str(tmp_path / "p")])
    assert res.exit_code == 1 and "CRASH: ValueError: boom" in res.stdout
    res = CliRunner().invoke(main, ["run", str(tmp_path / "p"), "--with", "nope"])
    assert res.exit_code == 2 and "unknown feature: nope" in res.output
    res = CliRunner().invoke(main, ["run", str(tmp_path / "p"), "--all", "--none"])
    assert res.exit_code == 2


def test_a_trial_whose_tfrepro_parent_is_killed_dies_with_it(tmp_path):
    # `tfrepro run` killed with SIGKILL cannot clean up: the trial notices its
    # parent is gone and kills its own process group (grandchild included).
    import subprocess

    p = hang_project(tmp_path, timeout=120)
    parent = subprocess.Popen(
        [sys.executable, "-m", "tfrepro", "run", str(p.root), "--no-cache"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    written = ""
    while time.monotonic() < deadline and not written:  # waits for the grandchild's pid, whole
        pid_files = list((p.root / ".tfrepro" / "trials").glob("*/variant/grandchild.pid"))
        written = pid_files[0].read_text().strip() if pid_files else ""
        time.sleep(0.1)
    assert written, "the trial never started"
    grandchild = int(written)
    parent.kill()
    parent.wait()
    assert _gone_ns(grandchild, p.root / ".tfrepro", within=10)


def test_the_state_dir_is_invisible_to_git(tmp_path):
    p = make_project(tmp_path / "p")
    run_trial(p, [], settings_of(p))
    assert (p.root / ".tfrepro" / ".gitignore").read_text().splitlines()[-1] == "*"
