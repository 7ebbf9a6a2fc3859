"""GPUs per trial (trials/executors.py), with fake GPU lists: the need, the pure
allocator, the pool under concurrent trials, the executor's pinning."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from tfrepro.settings import TrialSettings
from tfrepro.trials import executors as gpus_module
from tfrepro.trials.executors import GpuPool, LocalExecutor, assign, distribution_features, gpus_needed
from tfrepro.trials.trial import Trial

FOUR = ["0", "1", "2", "3"]


def test_the_need_follows_the_setting_and_the_distribution_features():
    assert distribution_features(["mirrored_strategy", "prefetch", "tpu_strategy"]) == [
        "mirrored_strategy",
        "tpu_strategy",
    ]
    assert gpus_needed(None, ["prefetch"], FOUR) == 1
    assert gpus_needed(None, ["prefetch", "mirrored_strategy"], FOUR) == 4
    assert gpus_needed(None, ["multi_worker_strategy"], FOUR) == 4
    assert gpus_needed("all", [], FOUR) == 4
    assert gpus_needed(2, ["mirrored_strategy"], FOUR) == 2
    assert gpus_needed(9, [], FOUR) == 4  # capped at what exists
    assert gpus_needed(0, [], FOUR) == 0
    assert gpus_needed(None, ["mirrored_strategy"], []) == 0  # no GPU: CPU trials


def test_assign_hands_out_the_lowest_free_ids_or_none():
    assert assign(FOUR, [], 2) == ("0", "1")
    assert assign(FOUR, ["0", "2"], 2) == ("1", "3")
    assert assign(FOUR, ["0", "2"], 3) is None
    assert assign(FOUR, FOUR, 0) == ()
    with pytest.raises(ValueError):
        assign(FOUR, [], 5)


def test_the_pool_gives_disjoint_sets_in_order_and_an_all_gpu_trial_runs_alone():
    pool = GpuPool(FOUR)
    assert [pool.acquire(1) for _ in FOUR] == [("0",), ("1",), ("2",), ("3",)]
    pool.release(FOUR)
    assert [pool.acquire(n) for n in (2, 1)] == [("0", "1"), ("2",)]
    pool.release(FOUR)
    assert pool.acquire(4) == tuple(FOUR) and assign(FOUR, pool._busy, 1) is None  # alone: nothing else fits


def test_the_pool_never_hands_out_a_busy_gpu_and_serves_in_arrival_order(monkeypatch):
    """Trials arrive one at a time (each queued before the next asks) while
    every GPU is taken; they hold their GPUs until released, oldest first.
    The order the pool serves them is recorded under its own lock."""
    pool = GpuPool(FOUR)
    blocker = pool.acquire(4)
    needs = [1, 2, 4, 1, 3, 1, 1, 2]
    served: list[int] = []
    got: dict[int, tuple[str, ...]] = {}
    overlap = []
    lock = threading.Lock()
    running: set[str] = set()
    release = [threading.Event() for _ in needs]
    real_assign = gpus_module.assign

    def recording_assign(devices, busy, need):
        ids = real_assign(devices, busy, need)
        if ids is not None:  # called under the pool's lock: this is the serving order
            served.append(int(threading.current_thread().name))
        return ids

    monkeypatch.setattr(gpus_module, "assign", recording_assign)

    def trial(i: int) -> None:
        ids = pool.acquire(needs[i])
        with lock:
            if running & set(ids):
                overlap.append(i)
            running.update(ids)
            got[i] = ids
        release[i].wait(30)
        with lock:
            running.difference_update(ids)
        pool.release(ids)

    threads = [threading.Thread(target=trial, args=(i,), name=str(i)) for i in range(len(needs))]
    for i, t in enumerate(threads):
        t.start()
        with pool._cond:  # arrival order: trial i is queued before trial i + 1 asks
            assert pool._cond.wait_for(lambda: pool._issued - pool._next == i + 1, timeout=30)
    pool.release(blocker)
    for r in range(len(needs)):  # release the oldest holder once it is served
        with pool._cond:
            assert pool._cond.wait_for(lambda: len(served) > r, timeout=30), served
        release[served[r]].set()
    for t in threads:
        t.join(30)
    assert served == list(range(len(needs)))  # first come, first served: trial 3 never overtakes trial 2
    assert not overlap
    assert [len(got[i]) for i in range(len(needs))] == needs
    assert got[2] == tuple(FOUR) and got[3] == ("0",)
    assert pool._busy == set() and pool._issued == pool._next  # none waiting


def test_local_executor_pins_each_trial_to_the_gpus_it_needs(monkeypatch):
    from tfrepro.trials import runner

    monkeypatch.setattr(runner, "run_trial", lambda project, enabled, settings, how: how.unkeyed_env)
    ex = LocalExecutor(3, devices=["4", "7"])
    project = SimpleNamespace(feature_names=("mirrored_strategy", "prefetch"))
    got = []
    for gpus in (None, 1, 0):
        req = Trial(("prefetch",), TrialSettings(gpus=gpus))
        got.append(ex.run_batch(project, [req])[0])
    assert got == [{"CUDA_VISIBLE_DEVICES": "4,7"}, {"CUDA_VISIBLE_DEVICES": "4"}, {"CUDA_VISIBLE_DEVICES": ""}]
    assert ex.pool._busy == set()


def test_gpus_enter_the_cache_key():
    from tfrepro.trials.runner import trial_key

    assert trial_key("v", TrialSettings(gpus=1)) != trial_key("v", TrialSettings(gpus="all"))
