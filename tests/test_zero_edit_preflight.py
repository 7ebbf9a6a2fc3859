"""Preflight: an OFF part that breaks the baseline is found and dropped (fake runner, milliseconds)."""

from __future__ import annotations

import math
from pathlib import Path

from tfrepro.bisect.ends import preflight, suspects
from tfrepro.bisect.engine import bisect
from tfrepro.project import Project
from tfrepro.trials.values import TrialResult

ON_PARTS = {
    "callback_history": "history_cb = keras.callbacks.History()",
    "mirrored_strategy": "strategy = tf.distribute.MirroredStrategy()",
    "prefetch": "ds = ds.prefetch(2)",
    "jit_compile": "jit = True",
}


def project(tmp_path: Path) -> Project:
    root = tmp_path / "proj"
    root.mkdir()
    lines = ["x = 0"]
    for name, on in ON_PARTS.items():
        lines += [f"# tfrepro: feature {name}", on, "# tfrepro: else", "# pass", "# tfrepro: end"]
    (root / "repro.py").write_text("\n".join(lines) + "\n")
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 20\n")
    return Project.load(root)


def losses(n: int = 20) -> tuple[float, ...]:
    return tuple(2.3 * 0.95**i for i in range(n))


def fake(behave):
    """A runner: `behave(effective ON set) -> TrialResult fields`; counts runs."""
    runs: list[frozenset[str]] = []

    def run(project, enabled, settings, **_):
        on = frozenset(enabled) | project.fixed_on
        runs.append(on)
        fields = {
            "losses": losses(),
            "step_times": (0.5,) * 3 + (0.02,) * 17,
            "mode": "fit",
            "steps_run": 20,
            "weights_finite": True,
        }
        fields.update(behave(on))
        return TrialResult(enabled=tuple(sorted(enabled)), key=str(hash((on, settings.repeat))), **fields)

    run.runs = runs  # type: ignore[attr-defined]
    return run


def crash(msg: str) -> dict:
    return {"crashed": True, "exit_code": 1, "error": msg, "losses": losses()[:1]}


NAN = {"losses": losses()[:3] + (math.nan,), "first_nonfinite_step": 4}


def needs_strategy(on):
    if "mirrored_strategy" not in on:
        return crash("NameError: name 'strategy' is not defined")
    return NAN if "jit_compile" in on else {}


def test_suspects_put_the_block_that_defines_the_missing_name_first(tmp_path):
    p = project(tmp_path)
    assert suspects(p, "NameError: name 'strategy' is not defined")[0] == "mirrored_strategy"
    assert suspects(p, "AttributeError: 'NoneType' object has no attribute 'history_cb'")[0] == "callback_history"
    assert suspects(p, None) == list(p.feature_names)


def test_a_broken_off_part_is_dropped_and_the_bisect_goes_on(tmp_path):
    run = fake(needs_strategy)
    doc = bisect(project(tmp_path), runner=run).to_dict()
    assert doc["status"] == "found" and doc["culprits"] == ["jit_compile"]
    (d,) = doc["dropped_features"]
    assert d["name"] == "mirrored_strategy" and "NameError: name 'strategy'" in d["reason"]
    assert "mirrored_strategy" not in doc["features"]
    # the suspect came first: the crash, then one fix; every later trial keeps the strategy on
    assert run.runs[:2] == [frozenset(), frozenset({"mirrored_strategy"})]
    assert all("mirrored_strategy" in r for r in run.runs[1:])


def test_a_baseline_broken_on_its_own_drops_nothing(tmp_path):
    run = fake(lambda on: crash("ValueError: bad data"))
    doc = bisect(project(tmp_path), runner=run).to_dict()
    assert doc["status"] == "baseline-fails" and doc["dropped_features"] == []
    assert "bad data" in doc["error"]


def test_two_broken_off_parts_are_both_dropped(tmp_path):
    def behave(on):
        if "callback_history" not in on:
            return crash("NameError: name 'history_cb' is not defined")
        if "mirrored_strategy" not in on:
            return crash("NameError: name 'strategy' is not defined")
        return {}

    got = preflight(project(tmp_path), lambda p: fake(behave)(p, (), _Settings()))
    assert [d["name"] for d in got.dropped] == ["callback_history", "mirrored_strategy"]
    assert not got.baseline.crashed
    assert set(got.project.feature_names) == {"prefetch", "jit_compile"}
    assert got.project.fixed_on == {"callback_history", "mirrored_strategy"}


def test_a_healthy_baseline_costs_no_extra_trial(tmp_path):
    ran = []
    got = preflight(project(tmp_path), lambda p: ran.append(p) or fake(lambda on: {})(p, (), _Settings()))
    assert len(ran) == 1 and got.dropped == [] and got.project.fixed_on == frozenset()


class _Settings:
    repeat = 0


def test_a_baseline_failing_with_only_always_on_features_names_the_suspect(tmp_path):
    # mirrored_strategy's OFF part breaks the script, and with it ON the baseline goes NaN
    def behave(on):
        if "mirrored_strategy" not in on:
            return crash("NameError: name 'strategy' is not defined")
        return NAN

    res = bisect(project(tmp_path), runner=fake(behave))
    doc = res.to_dict()
    assert doc["status"] == "baseline-fails"
    assert "every feature off except mirrored_strategy, always on" in doc["error"]
    assert "mirrored_strategy is the suspect" in doc["error"]

    from tfrepro.cli.display import answer_lines

    assert any(line.startswith("always on: mirrored_strategy") for line in answer_lines(res))
