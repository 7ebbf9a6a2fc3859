"""Executors without Ray and without TensorFlow: the batch interface, the
retry-once rule, could-not-run results, GPU pinning with a fake device list.
(The real Ray executor: tests/test_ray_e2e.py.)"""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.errors import UserError
from tfrepro.project import Project
from tfrepro.settings import SymptomSettings, TrialSettings
from tfrepro.trials import classify, confine, runner
from tfrepro.trials.executors import Executor, LocalExecutor, make_executor, visible_gpus
from tfrepro.trials.state import StateDir
from tfrepro.trials.trial import Trial, TrialOptions, could_not_run, retry_once
from tfrepro.trials.values import Status, TrialResult
from tfrepro.verdicts import Verdict

REPO = Path(__file__).resolve().parents[1]


def make_project(tmp_path: Path, features=("a", "b", "c")) -> Project:
    root = tmp_path / "proj"
    root.mkdir()
    lines = ["x = 0"]
    for f in features:
        lines += [f"# tfrepro: feature {f}", f"# x += 1  # {f}", "# tfrepro: end"]
    (root / "repro.py").write_text("\n".join(lines) + "\n")
    return Project.load(root)


def req(*enabled: str, repeat: int = 0) -> Trial:
    return Trial(tuple(enabled), TrialSettings(repeat=repeat), TrialOptions(label="search"))


class Recorder:
    """A runner that notes how many trials run at once, in which threads and
    which env each got. With `together=n` the first trials wait (a
    rendezvous, no sleep) until n run at once: `missed` when they never did."""

    def __init__(self, together: int = 0) -> None:
        self.cond = threading.Condition()
        self.running = self.peak = 0
        self.together, self.met, self.missed = together, False, False
        self.calls: list[tuple[tuple[str, ...], int]] = []
        self.threads: list[int] = []

    def __call__(self, project, enabled, settings, how=TrialOptions()):
        label = how.label
        with self.cond:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.threads.append(threading.get_ident())
            if self.together and not self.met:
                self.cond.notify_all()
                if not self.cond.wait_for(lambda: self.running >= self.together or self.met, timeout=30):
                    self.missed = True
                self.met = True
                self.cond.notify_all()
        with self.cond:
            self.running -= 1
            self.calls.append((tuple(enabled), settings.repeat))
        return TrialResult(enabled=tuple(enabled), label=label, losses=(1.0,), steps_run=1)


def test_run_batch_keeps_request_order_and_runs_jobs_at_once(tmp_path):
    p = make_project(tmp_path)
    runner = Recorder(together=3)
    ex = LocalExecutor(3, runner=runner)
    started, finished = [], []
    reqs = [req(f, repeat=r) for f in "abc" for r in range(2)]
    out = ex.run_batch(p, reqs, on_start=started.append, on_result=lambda i, r: finished.append(i))
    assert [r.enabled for r in out] == [q.enabled for q in reqs]
    assert not runner.missed and runner.peak == 3
    assert sorted(started) == sorted(finished) == list(range(6))


def test_one_job_runs_in_order_in_the_calling_thread(tmp_path):
    p = make_project(tmp_path)
    runner = Recorder()
    LocalExecutor(1, runner=runner).run_batch(p, [req("c"), req("a"), req("b")])
    assert [c[0] for c in runner.calls] == [("c",), ("a",), ("b",)] and runner.peak == 1
    assert set(runner.threads) == {threading.get_ident()}


def test_a_failing_trial_raises_after_the_batch_stops(tmp_path):
    p = make_project(tmp_path)

    def runner(project, enabled, settings, **_):
        if enabled == ("b",):
            raise RuntimeError("boom")
        return TrialResult(enabled=tuple(enabled))

    with pytest.raises(RuntimeError, match="boom"):
        LocalExecutor(2, runner=runner).run_batch(p, [req("a"), req("b"), req("c")])


# -- retry once ------------------------------------------------------------------


class Lost(Exception):
    pass


def flaky(losses: int):
    calls: list[int] = []

    def attempt(n: int) -> str:
        calls.append(n)
        if len(calls) <= losses:
            raise Lost(f"worker died (attempt {n})")
        return "result"

    return attempt, calls


def test_a_lost_attempt_is_retried_once():
    attempt, calls = flaky(1)
    value, lost = retry_once(attempt, lambda e: isinstance(e, Lost))
    assert value == "result" and calls == [0, 1] and lost == ["Lost: worker died (attempt 0)"]


def test_two_losses_give_nothing_and_no_third_try():
    attempt, calls = flaky(5)
    value, lost = retry_once(attempt, lambda e: isinstance(e, Lost))
    assert value is None and calls == [0, 1] and len(lost) == 2


def test_other_errors_are_not_retried():
    attempt, calls = flaky(1)
    with pytest.raises(Lost):
        retry_once(attempt, lambda e: False)
    assert calls == [0]


def test_could_not_run_is_untestable_never_a_symptom():
    r = could_not_run(["WorkerCrashedError: gone", "NodeDiedError: gone"])
    assert r.could_not_run and not r.crashed and "2 attempts lost" in r.error
    assert classify.symptoms(r, reference=None, settings=SymptomSettings()) == {Verdict.UNTESTABLE}
    assert classify.primary(classify.symptoms(r, reference=None, settings=SymptomSettings())) == Verdict.UNTESTABLE
    assert (
        classify.primary(classify.symptoms(r, reference=None, settings=SymptomSettings()), Verdict.NAN)
        == Verdict.UNTESTABLE
    )
    assert TrialResult.from_dict(r.to_dict()).could_not_run


def test_cached_run_never_caches_a_could_not_run_result(tmp_path):
    p = make_project(tmp_path)
    calls = []

    def lost(trial_dir: Path) -> TrialResult:
        calls.append(trial_dir)
        return could_not_run(["x"], trial_dir)

    state = StateDir.of(p.root)

    def cached_run(project, request, execute):
        return runner.cached(state, "k" * 64, request.enabled, request.how.label, request.how.use_cache, execute)

    for _ in range(2):
        r = cached_run(p, req("a"), lost)
        assert r.could_not_run and not r.cached and r.key
    assert len(calls) == 2 and not (p.root / ".tfrepro" / "cache").exists()

    ok = cached_run(p, req("a"), lambda d: TrialResult(losses=(1.0,)))
    again = cached_run(p, req("a"), lambda d: pytest.fail("should be a cache hit"))
    assert again.cached and again.key == ok.key and again.enabled == ("a",)


def test_a_spawned_trial_takes_the_local_key_cache_and_outside_stop(tmp_path):
    """Ray's path (`run_trial(spawn=...)`): the key a local trial of the same
    configuration gets, its cache, the stop at a write outside, and the
    `TrialOptions` `run_variant` would get (its env with the unkeyed part)."""
    p = make_project(tmp_path)
    settings = TrialSettings(steps=2)
    shipped = []

    def spawn(enabled, trial_dir, how):
        shipped.append((enabled, trial_dir, how))
        return TrialResult(losses=(1.0, 0.9), steps_run=2)

    how = TrialOptions(env={"A": "1"}, unkeyed_env={"CUDA_VISIBLE_DEVICES": "3"}, plugin_options={"x": 1})
    got = runner.run_trial(p, ["b", "a"], settings, how, spawn=spawn)
    assert shipped[0][0] == ("a", "b") and got.enabled == ("a", "b")
    assert shipped[0][2].env == {"A": "1", "CUDA_VISIBLE_DEVICES": "3"} and shipped[0][2].plugin_options == {"x": 1}
    assert got.key == runner.trial_key(p.variant_hash(("a", "b")), settings, replace(how, unkeyed_env=None))
    assert runner.run_trial(p, ["a", "b"], settings, how, spawn=lambda *a: pytest.fail("a cache hit")).cached

    def outside(enabled, trial_dir, how):
        return TrialResult(crashed=True, extra={"writes_outside": "/etc/x"})

    with pytest.raises(confine.WritesOutside, match="/etc/x"):
        runner.run_trial(p, ["c"], settings, spawn=outside)


def test_a_lost_culprit_trial_is_never_blamed(tmp_path):
    """The engine over an executor that loses every trial of feature b: the NaN
    culprit a is still found; b is never named."""
    p = make_project(tmp_path)

    class Losing(Executor):
        name = "fake"

        def _run(self, project, request, exclusive):
            on = set(request.enabled)
            if "b" in on and len(on) == 1:
                return could_not_run(["WorkerCrashedError", "WorkerCrashedError"])
            nan = "a" in on
            return TrialResult(
                enabled=request.enabled,
                losses=(1.0, float("nan")) if nan else (1.0, 0.9),
                first_nonfinite_step=2 if nan else None,
                steps_run=2,
                mode="loop",
            )

    res = bisect(p, BisectOptions(strategy="ablation"), executor=Losing(1))
    doc = res.to_dict()
    assert res.status == "found" and doc["culprits"] == ["a"]
    assert doc["ablation"]["b"] == "untestable"


def test_a_lost_end_trial_is_an_error_not_a_guess(tmp_path):
    """One rule for both modes (`ends.lost`, range mode's): an end trial the
    executor lost twice answers `error` (feature mode carried on, and a lost
    failing configuration could read as `none`)."""
    p = make_project(tmp_path)

    class LosingTheFailingEnd(Executor):
        name = "fake"

        def _run(self, project, request, exclusive):
            if set(request.enabled) == {"a", "b", "c"}:
                return could_not_run(["WorkerCrashedError", "WorkerCrashedError"])
            return TrialResult(enabled=request.enabled, losses=(1.0, 0.9), steps_run=2, mode="loop")

    res = bisect(p, executor=LosingTheFailingEnd(1))
    assert res.status == Status.ERROR
    assert res.error.startswith("the failing configuration cannot be tried: could not run (2 attempts lost)")


# -- GPUs ------------------------------------------------------------------------


def test_visible_gpus_from_env_or_nvidia_smi():
    smi = "GPU 0: NVIDIA A100 (UUID: x)\nGPU 1: NVIDIA A100 (UUID: y)\n"
    assert visible_gpus({}, lambda: smi) == ["0", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, lambda: smi) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, lambda: smi) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, lambda: smi) == []
    assert visible_gpus({}, lambda: None) == []


def test_the_executor_names_its_gpus():
    assert "GPUs 4,7" in LocalExecutor(2, devices=["4", "7"]).describe()
    assert "GPUs" not in LocalExecutor(2, devices=[]).describe()


def test_pinned_trials_see_their_gpu_and_share_the_unpinned_cache_key(tmp_path):
    """Real subprocesses: two concurrent trials each see one GPU id; the key
    is the one `run_trial` gives, so any GPU's result serves every slot."""
    from tfrepro.trials.runner import run_trial

    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text(
        "import os\nprint('gpu', os.environ.get('CUDA_VISIBLE_DEVICES'))\n"
        "# tfrepro: feature a\n# x = 1\n# tfrepro: end\n"
        "# tfrepro: feature b\n# x = 2\n# tfrepro: end\n"
        "for s in range(1, 3):\n    print(f'step={s} loss={1.0 / s}')\n"
    )
    p = Project.load(root)
    settings = TrialSettings(steps=2, timeout_s=60)
    ex = LocalExecutor(2, devices=["4", "7"])
    out = ex.run_batch(p, [Trial(("a",), settings), Trial(("b",), settings)])
    seen = {Path(r.log_dir, "stdout.log").read_text().splitlines()[0] for r in out}
    assert seen == {"gpu 4", "gpu 7"}
    assert all(r.steps_run == 2 and not r.cached for r in out)
    again = run_trial(p, ("a",), settings)  # the plain local runner: a cache hit
    assert again.cached and again.key == out[0].key


# -- choosing an executor ----------------------------------------------------------


def test_make_executor_checks_its_options():
    assert isinstance(make_executor("local", jobs=3), LocalExecutor)
    assert make_executor("local", jobs=3).slots == 3
    with pytest.raises(UserError, match="--address needs --executor ray"):
        make_executor("local", address="1.2.3.4:6379")
    with pytest.raises(UserError, match="unknown executor"):
        make_executor("dask")


def test_without_ray_the_error_says_how_to_install_it(tmp_path):
    """A Python where `import ray` fails (a shadowing module)."""
    (tmp_path / "ray.py").write_text("raise ImportError('No module named ray')\n")
    code = (
        "from tfrepro.trials.executors import make_executor\n"
        "try:\n    make_executor('ray')\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.stdout.startswith("UserError --executor ray needs Ray"), out.stderr
    assert "pip install 'tfrepro[ray]'" in out.stdout


def test_help_does_not_import_ray():
    code = "import sys, tfrepro.cli, tfrepro.bisect.engine; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


def test_the_local_description_says_cold_processes_under_the_clis_cold(monkeypatch):
    """`--cold` (warm.COLD) is the one switch for local trials: the
    executor's description says so (it used to read a flag nobody set)."""
    from tfrepro.trials import warm

    ex = LocalExecutor(1, runner=lambda *a, **k: TrialResult())
    monkeypatch.setattr(warm, "COLD", False)
    assert "cold" not in ex.describe()
    monkeypatch.setattr(warm, "COLD", True)
    assert "cold processes" in ex.describe()


def test_a_given_result_is_never_spawned_by_any_executor():
    """`Trial.given` (a result known already) is the executor base's rule, so
    a spawner that is not the local one (Ray's) honours it too."""
    from tfrepro.trials.trial import Executor

    class Spawner(Executor):
        def _run(self, project, request, exclusive):
            raise AssertionError("spawned a trial whose result was given")

    known = TrialResult(losses=(1.0,), steps_run=1)
    trial = Trial((), TrialSettings(), given=known)
    ex = Spawner(2)
    assert ex.run_batch(None, [trial])[0] is known and ex.run_timed(None, trial) is known
    assert ex.run_batch(None, [trial, trial]) == [known, known]
