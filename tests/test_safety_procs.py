"""No trial outlives tfrepro, and Ctrl-C stops running trials at once: real processes.

A helper process stands for tfrepro (it runs trials through the real runner);
the test kills it (SIGKILL: no cleanup code of ours runs) or interrupts it
(SIGINT) and looks for what is left, by a marker in the command line and by
pids the trial scripts write down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from nspids import host_pids

REPO = Path(__file__).resolve().parents[1]

SLEEPER = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", *sys.argv[1:]])
with open(os.path.join(os.environ["PIDS"], str(os.getpid())), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
print("step=1 loss=1.0", flush=True)
time.sleep(300)
"""

HELPER = """\
import sys
from pathlib import Path
from tfrepro.settings import TrialSettings
from tfrepro.trials import runner, warm
from tfrepro.trials.trial import TrialOptions
d, how, marker = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
py = sys.executable
if how == "shell":
    settings = TrialSettings(command=("bash", "-c", f"{py} s.py {marker}; echo after"), timeout_s=120)
    runner.run_variant(d, settings, d.parent / "trial", TrialOptions(cold=True))
else:
    settings = TrialSettings(command=("python", "s.py", marker), timeout_s=120)
    pool = warm.WarmPool(preload=(), only_tf_scripts=False)
    r = runner.run_variant(d, settings, d.parent / "trial", warm_pool=pool)
"""


def _procs_with(marker: str) -> list[int]:
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                out.append(int(cmdline.parent.name))
        except OSError:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(cond, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _setup(tmp_path: Path) -> tuple[Path, Path, dict]:
    d = tmp_path / "variant"
    d.mkdir()
    (d / "s.py").write_text(SLEEPER)
    pids = d / "pids"  # in the trial's cwd: a confined trial writes only there
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIDS": str(pids)}
    return d, pids, env


def _kill_helper_mid_trial(tmp_path: Path, how: str) -> list[int]:
    """SIGKILL a tfrepro process in the middle of a trial; the processes of
    that trial still alive 5 s later (the trial's own, plus, for a shell
    command, every process carrying its marker)."""
    d, pids, env = _setup(tmp_path)
    marker = f"tfrepro-marker-{uuid.uuid4().hex}"
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER, str(d), how, marker], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert _wait_for(lambda: any(pids.iterdir()), 60), helper.communicate(timeout=5)
        trial_pids = host_pids([int(x) for f in pids.iterdir() for x in f.read_text().split()], d)
        assert all(_alive(p) for p in trial_pids)
        os.kill(helper.pid, signal.SIGKILL)
        helper.wait()

        def left() -> list[int]:
            mine = [p for p in trial_pids if _alive(p)]
            if how == "shell":  # bash, the python under it and its child all carry the marker
                mine += [p for p in _procs_with(marker) if _alive(p) and p not in mine]
            return mine

        _wait_for(lambda: not left(), 5)
        return left()
    finally:
        if helper.poll() is None:
            helper.kill()
        helper.communicate()


def test_a_killed_tfrepro_leaves_no_process_of_a_shell_command_trial(tmp_path):
    assert _kill_helper_mid_trial(tmp_path, "shell") == []


def test_a_killed_tfrepro_leaves_no_process_of_a_warm_trial(tmp_path):
    assert _kill_helper_mid_trial(tmp_path, "warm") == []


STARTER = """\
import os, subprocess, sys
from pathlib import Path
from tfrepro.trials.procs import confined
d, marker = Path(sys.argv[1]), sys.argv[2]
argv = confined([sys.executable, "-c", "import time; time.sleep(300)", marker], d)
subprocess.Popen(argv, cwd=d, stdin=subprocess.DEVNULL, start_new_session=True)
os._exit(0)  # killed the instant its trial's process exists: before any wrapper set up a watch
"""


@pytest.mark.parametrize("mode", ["overlay", "landlock"])
def test_a_tfrepro_killed_while_a_cold_trial_starts_leaves_no_process(tmp_path, mode):
    """The race a killed bisect hit in CI: tfrepro died between starting a
    trial's process and that process's own parent watch (bubblewrap sets
    PR_SET_PDEATHSIG only after building its namespaces, and never checks
    whether its parent is already gone). Five trials, each orphaned at once."""
    from tfrepro.trials import confine

    env = {**os.environ, "PYTHONPATH": str(REPO), confine.ENV: mode}
    probe = subprocess.run(
        [sys.executable, "-c", "from tfrepro.trials import confine; print(confine.detect().mode)"],
        env=env,
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() != mode:
        pytest.skip(f"no {mode} confinement here: {probe.stdout.strip() or probe.stderr[-300:]}")
    markers = []
    for _ in range(5):
        marker = f"tfrepro-marker-{uuid.uuid4().hex}"
        markers.append(marker)
        subprocess.run([sys.executable, "-c", STARTER, str(tmp_path), marker], env=env, check=True)

    def left() -> list[int]:
        return [p for m in markers for p in _procs_with(m) if _alive(p)]

    _wait_for(lambda: not left(), 10)
    stray = left()
    for pid in stray:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert stray == []


BATCH = """\
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1)  # a hang shows its threads' stacks (see the test)
# Ctrl-C as in a terminal, however the suite was started: a shell without job
# control starts background commands (`cmd &`, nohup) with SIGINT ignored,
# and this process would inherit that
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from tfrepro.project import Project
from tfrepro.trials.executors import LocalExecutor
from tfrepro.trials.trial import Trial
p = Project.load(Path(sys.argv[1]))
s = p.manifest.trial
reqs = [Trial(enabled, s) for enabled in [(), ("slow",), ("slow", "other")]]
with LocalExecutor(2) as ex:
    ex.run_batch(p, reqs)
print("finished")
"""

PROJECT = """\
import os, time
SLOW = False
# tfrepro: feature slow -- sleeps for a long time
# SLOW = True
# tfrepro: end
# tfrepro: feature other -- nothing
# OTHER = 1
# tfrepro: end
# pids repeat across trials in their own PID namespaces: a unique name
with open(os.path.join(os.environ["PIDS"], f"{os.getpid()}-{os.urandom(4).hex()}"), "w") as f:
    f.write(str(os.getpid()))
if SLOW:
    time.sleep(600)  # until killed: only Ctrl-C ends it (within the test's 30 s)
print("step=1 loss=1.0")
"""


def test_ctrl_c_with_jobs_2_stops_running_trials_at_once_and_keeps_finished_ones(tmp_path):
    from tfrepro.project import Project
    from tfrepro.trials.executors import LocalExecutor
    from tfrepro.trials.trial import Trial

    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text(textwrap.dedent(PROJECT))
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 5\ntimeout_s = 120\n")
    pids = tmp_path / "pids"
    pids.mkdir()
    # the trials (confined to their dirs) write their pids here for real
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIDS": str(pids), "TFREPRO_CONFINE_WRITABLE": str(pids)}
    helper = subprocess.Popen(
        [sys.executable, "-c", BATCH, str(root)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # the fast trial finishes (its result cached), the two slow ones run side by side
        cache = root / ".tfrepro" / "cache"
        started = _wait_for(lambda: len(list(pids.iterdir())) >= 3 and any(cache.glob("*.json")), 60)
        assert started, helper.communicate(timeout=5)
        running = host_pids([int(f.read_text()) for f in pids.iterdir()], root / ".tfrepro")
        assert len(running) == 2
        helper.send_signal(signal.SIGINT)
        try:
            out, err = helper.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            helper.send_signal(signal.SIGUSR1)  # every thread's stack to stderr, then fail with it
            time.sleep(1)
            helper.kill()
            out, err = helper.communicate()
            raise AssertionError(f"Ctrl-C did not stop the batch; its threads:\n{err}") from None
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.communicate()
    assert "KeyboardInterrupt" in err and "finished" not in out
    assert not any(_alive(p) for p in running)
    assert len(list(cache.glob("*.json"))) == 1  # the finished trial, not the killed ones

    # resume: the finished trial comes from the cache
    os.environ["PIDS"] = os.environ["TFREPRO_CONFINE_WRITABLE"] = str(pids)  # as the first run had them
    try:
        p = Project.load(root)
        (fast,) = LocalExecutor(1).run_batch(p, [Trial((), p.manifest.trial)])
    finally:
        del os.environ["PIDS"], os.environ["TFREPRO_CONFINE_WRITABLE"]
    assert fast.cached and fast.losses == (1.0,)
