"""Issue 26: known costs (tfrepro/catalog.py): a slowdown that is the documented
cost of a feature on its hardware is said to be one, and `report` explains it
with the fix instead of drafting a bug report (unless --force)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_engine import FakeRunner, make_project

from tfrepro.bisect.engine import BisectOptions, bisect
from tfrepro.catalog import known_cost
from tfrepro.cli import main
from tfrepro.cli.display import answer_lines
from tfrepro.verdicts import Verdict

PLAIN_CPU = {"accelerators": [], "cpu_fp16": False, "cpu_bf16": False, "replicas": 1}
FP16 = "mixed_float16 compute policy"


def test_mixed_float16_on_a_cpu_is_a_known_cost():
    got = known_cost(["mixed_precision"], "slowdown", PLAIN_CPU, lambda n: FP16)
    assert got and "45441" in got.source and "keep float32" in got.fix
    bf16_cpu = {**PLAIN_CPU, "cpu_bf16": True}
    assert "use mixed_bfloat16 on this CPU" in known_cost(["mixed_precision"], "slowdown", bf16_cpu, lambda n: FP16).fix
    # a CPU with float16 instructions too: TensorFlow 2.21 on an AVX512-FP16 Xeon, 80-123x slower
    fp16_cpu = known_cost(["mixed_precision"], "slowdown", {**PLAIN_CPU, "cpu_fp16": True}, lambda n: FP16)
    assert fp16_cpu and "float16 instructions do not make" in fp16_cpu.fix
    # not a cost: on a GPU, for a NaN, or with another culprit
    assert known_cost(["mixed_precision"], "slowdown", {**PLAIN_CPU, "accelerators": ["GPU"]}, lambda n: FP16) is None
    assert known_cost(["mixed_precision"], "nan", PLAIN_CPU, lambda n: FP16) is None
    assert known_cost(["mixed_precision", "callback_slow"], "slowdown", PLAIN_CPU, lambda n: FP16) is None
    assert known_cost(["mixed_precision"], "slowdown", {}, lambda n: FP16) is None  # hardware unknown: no claim


def test_a_strategy_over_one_replica_xla_on_cpu_and_eager_are_known_costs():
    assert known_cost(["mirrored_strategy"], "slowdown", PLAIN_CPU).reason.startswith("a distribution strategy")
    assert known_cost(["mirrored_strategy"], "slowdown", {**PLAIN_CPU, "replicas": 2}) is None
    assert "XLA" in known_cost(["jit_compile"], "slowdown", PLAIN_CPU).reason
    assert "eager" in known_cost(["eager_debug"], "slowdown", PLAIN_CPU).reason


def _slow_mixed_precision(cfg, r):
    hw = {"extra": {"hardware": PLAIN_CPU}}
    if "mixed_precision" in cfg:
        return {"step_times": (0.5,) * 3 + (0.06,) * 57, **hw}
    return {"step_times": (0.5,) * 3 + (0.02,) * 57, **hw}


def test_the_result_and_the_cli_carry_it_and_report_explains_instead_of_drafting(tmp_path, monkeypatch):
    p = make_project(tmp_path, ["cache", "mixed_precision", "prefetch"], steps=60)
    res = bisect(p, BisectOptions(symptom=Verdict.SLOWDOWN), runner=FakeRunner(_slow_mixed_precision))
    doc = res.to_dict()
    assert (doc["status"], doc["culprits"]) == ("found", ["mixed_precision"])
    assert doc["known_cost"] and doc["known_cost"]["features"] == ["mixed_precision"]
    text = "\n".join(answer_lines(res))
    assert "known cost, not a bug" in text and "fix: keep float32" in text
    monkeypatch.chdir(p.root)
    r = CliRunner().invoke(main, ["report", doc["run_dir"], "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "known_cost"
    explanation = (p.root / doc["run_dir"] / "report" / "EXPLANATION.md").read_text()
    assert "a known cost, not a bug" in explanation and "**Fix:** keep float32" in explanation
    assert not (p.root / doc["run_dir"] / "report" / "ISSUE.md").exists()
