"""The Ray executor for real: a local Ray instance on 127.0.0.1 (one per module).

The planted projects are tiny Python scripts printing `step=N loss=X` lines
(a custom loop for the harness), so every trial is a real subprocess on a
Ray worker without TensorFlow's start-up cost (one warm trial pays it once,
in its worker's warm server). What is checked is what a user would notice:
the same answer (culprits, verdicts, first bad commit) as the local
executor, a worker killed in the middle of a trial is retried once, `--cold`
holds on the workers, and the results land in the project's trial cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tfrepro.trials.executors import keep_ray_on_loopback  # noqa: E402

keep_ray_on_loopback()  # the test instance binds and advertises 127.0.0.1 only
ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'tfrepro[ray]'")

from tfrepro.bisect.engine import BisectOptions, bisect  # noqa: E402
from tfrepro.project import Project  # noqa: E402
from tfrepro.settings import SymptomSettings, TrialSettings  # noqa: E402
from tfrepro.trials.trial import Trial, TrialOptions  # noqa: E402

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]

# NaN only when fp16 and big_lr are both on: ablation finds no single
# culprit, delta debugging finds the pair.
FEATURES = """\
lr, half = 0.1, False
# tfrepro: feature warmup -- harmless
# lr = 0.1
# tfrepro: end
# tfrepro: feature fp16 -- half of the NaN
# half = True
# tfrepro: end
# tfrepro: feature big_lr -- the other half
# lr = 3.0
# tfrepro: end
# tfrepro: feature logging -- harmless
# verbose = True
# tfrepro: end
loss = 2.0
for step in range(1, 9):
    loss = float("nan") if half and lr > 1 and step >= 3 else loss * (1 - lr / 10)
    print(f"step={step} loss={loss}", flush=True)
"""
MANIFEST = "[trial]\nsteps = 8\ntimeout_s = 60\n"


DROP: Path | None = None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One Ray instance for the module: 2 CPUs, a small object store, no dashboard.
    It binds and advertises 127.0.0.1 only (see `keep_ray_on_loopback`).
    Its workers inherit a drop box the confined trials may really write
    (TFREPRO_CONFINE_WRITABLE): the killer script's attempts log."""
    global DROP
    DROP = tmp_path_factory.mktemp("drop")
    os.environ["TFREPRO_CONFINE_WRITABLE"] = str(DROP)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 2**20,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        os.environ.pop("TFREPRO_CONFINE_WRITABLE", None)


def planted(dest: Path, script: str = FEATURES) -> Path:
    dest.mkdir(parents=True)
    (dest / "repro.py").write_text(script)
    (dest / "tfrepro.toml").write_text(MANIFEST)
    return dest


def answer(doc: dict) -> dict:
    """What must not depend on the executor: the answer and every trial's verdict."""
    rows = sorted((tuple(r["enabled"]), r["role"], r["repeat"], r["verdict"], r["key"]) for r in doc["trials_table"])
    return {k: doc[k] for k in ("status", "symptom", "culprits", "culprit_config", "ablation")} | {"rows": rows}


def test_feature_bisect_gives_the_local_answer_and_fills_the_same_cache(cluster, tmp_path):
    from tfrepro.trials.ray_executor import RayExecutor

    local_p = Project.load(planted(tmp_path / "local"))
    ray_p = Project.load(planted(tmp_path / "ray"))
    local = bisect(local_p, BisectOptions(jobs=2, use_cache=False)).to_dict()
    assert local["status"] == "found" and local["culprits"] == ["big_lr", "fp16"]

    ex = RayExecutor()
    assert ex.slots == 2 and not ex._connection.owns  # joined the module's instance
    remote = bisect(ray_p, BisectOptions(executor="ray", use_cache=False), executor=ex).to_dict()
    assert answer(remote) == answer(local)
    assert ex.attempts == remote["trials"]  # every trial was a task, none retried
    run_dir = Path(remote["run_dir"]) if Path(remote["run_dir"]).is_absolute() else Path.cwd() / remote["run_dir"]
    first = remote["trials_table"][0]
    summary = json.loads((run_dir / first["summary"]).read_text())
    assert summary["extra"]["executor"] == "ray" and summary["steps_run"] == 8
    assert "step=8 loss=" in (run_dir / Path(first["summary"]).parent / "stdout.log").read_text()

    # The ray run's results are in the project's cache: a local rerun runs nothing.
    again = bisect(ray_p, BisectOptions(jobs=2)).to_dict()
    assert answer(again) == answer(local)
    assert again["cached_trials"] == again["trials"] == remote["trials"]


KILLER = """\
import os, signal
attempt = os.environ.get("TFREPRO_RAY_ATTEMPT")
with open({log!r}, "a") as f:
    f.write(f"{{attempt}}\\n")
kill = attempt == "0"
# tfrepro: feature always -- every attempt kills its worker
# kill = True
# tfrepro: end
if kill:
    # the Ray worker running this trial: our parent, or the launcher's parent
    # (a cold trial runs behind tfrepro's watchdog launcher)
    target = os.getppid()
    if b"launch.py" in open(f"/proc/{{target}}/cmdline", "rb").read():
        target = int(open(f"/proc/{{target}}/stat").read().rsplit(")", 1)[1].split()[1])
    os.kill(target, signal.SIGKILL)
    os._exit(0)
for step in range(1, 4):
    print(f"step={{step}} loss={{1.0 / step}}", flush=True)
"""


def _pid_namespace_confinement() -> bool:
    from tfrepro.trials import confine

    return confine.detect().mode == "overlay"


@pytest.mark.skipif(
    "_pid_namespace_confinement()",
    reason="the script kills its Ray worker through getppid(), which a confined trial's PID namespace hides; "
    "a worker lost mid-trial and retried is covered by tests/test_ray_multinode_e2e.py (a node killed mid-hunt)",
)
def test_a_worker_killed_mid_trial_is_retried_once_then_could_not_run(cluster, tmp_path):
    from tfrepro.trials.ray_executor import RayExecutor

    log = DROP / f"attempts-{tmp_path.name}.log"
    p = Project.load(planted(tmp_path / "proj", KILLER.format(log=str(log))))
    ex = RayExecutor()
    settings = TrialSettings(steps=3, timeout_s=60)

    r = ex.run_batch(p, [Trial((), settings)])[0]
    assert log.read_text() == "0\n1\n"  # killed on the first attempt, run again
    assert not r.could_not_run and not r.crashed and r.steps_run == 3 and r.extra["attempts"] == 2
    assert (p.root / ".tfrepro" / "cache" / f"{r.key}.json").is_file()
    hit = ex.run_batch(p, [Trial((), settings)])[0]
    assert hit.cached and log.read_text() == "0\n1\n"

    lost = ex.run_batch(p, [Trial(("always",), settings)])[0]
    assert log.read_text() == "0\n1\n0\n1\n"  # two attempts, no third
    assert lost.could_not_run and "2 attempts lost" in lost.error and "WorkerCrashedError" in lost.error
    assert not (p.root / ".tfrepro" / "cache" / f"{lost.key}.json").exists()  # never cached
    ex.run_batch(p, [Trial(("always",), TrialSettings(steps=2, timeout_s=60))])[0]  # sweeps on the way
    alive = [d for d in (Path(tempfile.gettempdir()) / "tfrepro-ray").iterdir()]
    assert len(alive) <= 1  # the dead workers' temp dirs were removed (the last killed one may remain)


def test_cli_joins_an_existing_cluster_by_address(cluster, tmp_path):
    proj = planted(tmp_path / "proj")
    code = "import sys; from tfrepro.cli import main; sys.argv[0] = 'tfrepro'; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code, "bisect", "--executor", "ray", "--address", cluster, "--json", str(proj)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["culprits"] == ["big_lr", "fp16"]
    assert f"ray: joining the cluster at {cluster}" in out.stderr
    cached = [json.loads(f.read_text()) for f in (proj / ".tfrepro" / "cache").glob("*.json")]
    assert len(cached) == doc["trials"] and all(c["extra"]["executor"] == "ray" for c in cached)


def test_commit_bisect_gives_the_local_answer(cluster, tmp_path, monkeypatch):
    from gitrepo import GitRepo, isolated_git_env
    from test_commits_e2e import FIRST_BAD, build

    from tfrepro.bisect.commits import bisect_commits
    from tfrepro.trials.ray_executor import RayExecutor

    isolated_git_env(tmp_path / "home", monkeypatch)
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    shas = build(repo, sleep=0)
    proj = repo.root / "proj"

    def same(doc: dict) -> dict:
        return {
            "status": doc["status"],
            "first_bad_commit": doc["first_bad_commit"],
            "tried": [(t["sha"], t["verdict"]) for t in doc["tried"]],
        }

    from tfrepro.trials.executors import LocalExecutor

    ray_ex = RayExecutor()
    # The same width of rounds (k-ary with the cluster's slots) tries the same commits.
    local = bisect_commits(
        proj, shas[0], "main", BisectOptions(use_cache=False), executor=LocalExecutor(ray_ex.slots)
    ).to_dict()
    assert local["first_bad_commit"] == shas[FIRST_BAD]
    remote = bisect_commits(proj, shas[0], "main", BisectOptions(use_cache=False), executor=ray_ex).to_dict()
    assert same(remote) == same(local)
    again = bisect_commits(
        proj,
        shas[0],
        "main",  # local, from the cache the ray run wrote
        executor=LocalExecutor(ray_ex.slots),
    ).to_dict()
    assert same(again) == same(local) and again["cached_trials"] == again["trials"]


def test_state_dir_leftovers_are_only_trial_dirs(cluster, tmp_path):
    """Sanity of the layout a ray run leaves: trial dirs hold the logs, no variant copies."""
    from tfrepro.trials.ray_executor import RayExecutor

    p = Project.load(planted(tmp_path / "proj"))
    r = RayExecutor().run_batch(p, [Trial(("fp16",), TrialSettings(steps=8, timeout_s=60))])[0]
    trial_dir = Path(r.log_dir)
    assert trial_dir.parent == p.root / ".tfrepro" / "trials"
    # tfrepro's own record of the dir it made (trials/state.py) beside the logs
    assert sorted(x.name for x in trial_dir.iterdir() if x.name != ".tfrepro-made") == ["stderr.log", "stdout.log"]
    shutil.rmtree(p.root / ".tfrepro")


SHOWS_ENV = """\
import os
print("word", os.environ.get("MY_WORD"), "wrapped", os.environ.get("VIA_WRAPPER"), flush=True)
for step in range(1, 3):
    print(f"step={step} loss={1.0 / step}", flush=True)
"""


def test_a_trial_runs_with_its_whole_options_as_a_local_trial_does(cluster, tmp_path):
    """The task gets the trial's `TrialOptions` whole: its env, its plugins
    (with their options) and its interpreter reach the trial on the worker
    (a Ray trial once ran with none of them)."""
    from tfrepro.trials.ray_executor import RayExecutor

    plugin = tmp_path / "plugin.py"
    plugin.write_text("def install(ctx):\n    ctx.record('plugin_saw', ctx.options['word'])\n")
    python = tmp_path / "python"  # the interpreter the trial must run under: a wrapper that says so
    python.write_text(f'#!/bin/sh\nVIA_WRAPPER=yes exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    how = TrialOptions(
        use_cache=False, env={"MY_WORD": "hello"}, plugins=(plugin,), plugin_options={"word": "hi"}, python=str(python)
    )
    assert pickle.loads(pickle.dumps(how)) == how  # it travels as it is
    p = Project.load(planted(tmp_path / "proj", SHOWS_ENV))
    r = RayExecutor().run_batch(p, [Trial((), TrialSettings(steps=2, timeout_s=60), how)])[0]
    assert (r.extra["executor"], r.steps_run, r.crashed) == ("ray", 2, False), r.error
    assert Path(r.log_dir, "stdout.log").read_text().splitlines()[0] == "word hello wrapped yes"
    assert r.extra["plugin_saw"] == "hi"


# Looks like a TensorFlow script (so a trial is forked from the worker's warm
# server, which imports TensorFlow once) but imports nothing: a cold trial of
# it starts in milliseconds.
LOOKS_TF = """\
if False:
    import tensorflow
# tfrepro: feature a -- harmless
# x = 1
# tfrepro: end
for step in range(1, 4):
    print(f"step={step} loss={1.0 / step}", flush=True)
"""


def test_cold_trials_are_cold_on_the_workers(cluster, tmp_path):
    """A trial's `TrialOptions(cold=True)`, and the driver's `--cold`
    (`warm.COLD`), reach the worker: its trials are cold processes;
    without either they are forked warm."""
    from tfrepro.trials import warm
    from tfrepro.trials.executors import make_executor
    from tfrepro.trials.ray_executor import RayExecutor

    p = Project.load(planted(tmp_path / "proj", LOOKS_TF))
    request = Trial((), TrialSettings(steps=3, timeout_s=120), TrialOptions(use_cache=False))

    ex = make_executor("ray")
    assert isinstance(ex, RayExecutor) and "cold" not in ex.describe()
    r = ex.run_batch(p, [Trial(request.enabled, request.settings, TrialOptions(use_cache=False, cold=True))])[0]
    assert r.extra["process"] == "cold" and r.steps_run == 3 and not r.crashed
    warm.COLD = True
    try:
        forced = RayExecutor()
        assert "cold processes" in forced.describe()
        assert forced.run_batch(p, [request])[0].extra["process"] == "cold"
    finally:
        warm.COLD = False

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("a warm trial needs TensorFlow on the worker (its warm server imports it)")
    hot = RayExecutor()
    assert "cold" not in hot.describe()
    r = hot.run_batch(p, [request])[0]
    assert r.extra["process"] == "warm" and r.steps_run == 3 and not r.crashed


def test_cli_cold_reaches_the_workers(cluster, tmp_path):
    """`tfrepro bisect --executor ray --cold`: every trial ran cold on a worker
    (forked warm, the worker would have imported TensorFlow first)."""
    proj = planted(tmp_path / "proj", LOOKS_TF)
    code = "import sys; from tfrepro.cli import main; sys.argv[0] = 'tfrepro'; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = ["bisect", "--executor", "ray", "--address", cluster, "--cold", "--json", str(proj)]
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    doc = json.loads(out.stdout)
    assert doc["trials"] >= 1, out.stderr[-2000:]
    cached = [json.loads(f.read_text()) for f in (proj / ".tfrepro" / "cache").glob("*.json")]
    assert len(cached) == doc["trials"]
    assert {(c["extra"]["executor"], c["extra"]["process"]) for c in cached} == {("ray", "cold")}


SLOW = """\
import time
pause = 0.004
# tfrepro: feature a -- harmless
# x = 1
# tfrepro: end
# tfrepro: feature slow -- triples the step time
# pause = 0.012
# tfrepro: end
# tfrepro: feature c -- harmless
# y = 2
# tfrepro: end
loss = 2.0
for step in range(1, 13):
    time.sleep(pause)
    loss *= 0.9
    print(f"step={step} loss={loss}", flush=True)
"""


def test_slowdown_timing_trials_run_alone_on_one_node(cluster, tmp_path):
    from tfrepro.trials.ray_executor import RayExecutor

    root = planted(tmp_path / "proj", SLOW)
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 12\ntimeout_s = 60\n")
    ex = RayExecutor()
    doc = bisect(Project.load(root), BisectOptions(executor="ray"), executor=ex).to_dict()
    assert (doc["status"], doc["symptom"], doc["culprits"]) == ("found", "slowdown", ["slow"])
    assert doc["timing"]["ratio"] >= SymptomSettings().slowdown and doc["timing"]["conclusive"]  # the rule's own bar
    node, cpus = ex._timing_node
    opts = ex._options(True)
    assert opts["num_cpus"] == cpus == 2  # the whole node: nothing else runs beside a timing trial
    assert opts["scheduling_strategy"].node_id == node and opts["scheduling_strategy"].soft is False
    run_dir = Path(doc["run_dir"]) if Path(doc["run_dir"]).is_absolute() else Path.cwd() / doc["run_dir"]
    timed = [
        json.loads((run_dir / r["summary"]).read_text()) for r in doc["trials_table"] if r["role"].startswith("timing")
    ]
    assert len(timed) >= 6 and {t["extra"]["node"] for t in timed} == {node}


def test_the_local_instance_lives_on_loopback(cluster):
    # A Ray instance tfrepro starts has no business on the network.
    assert cluster.startswith("127.0.0.1:")
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
