"""GPUs per trial (trials/gpus.py), with fake GPU lists: the need, the pure
allocator, the pool under concurrent trials, the executor's pinning."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from tfrepro.settings import TrialSettings
from tfrepro.trials.executors import LocalExecutor, TrialRequest
from tfrepro.trials.gpus import GpuPool, assign, distribution_features, gpus_needed, pack

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


def test_pack_gives_disjoint_sets_in_order_and_an_all_gpu_trial_runs_alone():
    assert pack(FOUR, [1, 1, 1, 1, 1], jobs=8) == [(0, ("0",)), (1, ("1",)), (2, ("2",)), (3, ("3",))]
    assert pack(FOUR, [2, 1, 1], jobs=2) == [(0, ("0", "1")), (1, ("2",))]
    assert pack(FOUR, [4, 1], jobs=4) == [(0, tuple(FOUR))]
    assert pack(FOUR, [1, 4, 1], jobs=4) == [(0, ("0",))]  # arrival order: the big one waits, nobody overtakes


def test_the_pool_never_hands_out_a_busy_gpu_and_serves_in_order():
    pool = GpuPool(FOUR)
    needs = [1, 2, 4, 1, 3, 1, 1, 2]
    seen: list[tuple[int, tuple[str, ...]]] = []
    overlap = []
    lock = threading.Lock()
    running: set[str] = set()

    def trial(i: int) -> None:
        time.sleep(0.002 * i)  # arrive in index order
        ids = pool.acquire(needs[i])
        with lock:
            if running & set(ids):
                overlap.append(i)
            running.update(ids)
            seen.append((i, ids))
        time.sleep(0.02)
        with lock:
            running.difference_update(ids)
        pool.release(ids)

    threads = [threading.Thread(target=trial, args=(i,)) for i in range(len(needs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not overlap
    assert sorted(i for i, _ in seen) == list(range(len(needs)))
    assert [len(ids) for i, ids in sorted(seen)] == needs
    assert dict(seen)[2] == tuple(FOUR)
    assert pool.busy == frozenset()


def test_local_executor_pins_each_trial_to_the_gpus_it_needs():
    ex = LocalExecutor(3, devices=["4", "7"])
    project = SimpleNamespace(feature_names=("mirrored_strategy", "prefetch"))
    got = []
    for gpus in (None, 1, 0):
        req = TrialRequest(("prefetch",), TrialSettings(gpus=gpus))
        got.append(ex._on_free_gpus(project, req, lambda env: env))
    assert got == [{"CUDA_VISIBLE_DEVICES": "4,7"}, {"CUDA_VISIBLE_DEVICES": "4"}, {"CUDA_VISIBLE_DEVICES": ""}]
    assert ex.pool.busy == frozenset()


def test_gpus_enter_the_cache_key():
    from tfrepro.trials.runner import trial_key

    assert trial_key("v", TrialSettings(gpus=1)) != trial_key("v", TrialSettings(gpus="all"))
