"""The bundled example projects (tfrepro/examples/*): fast static checks.

Each example is a repro project with a planted bug and an `expected.json`
saying what `tfrepro bisect` should find. Running them is the benchmark's job
(benchmarks/bisect_suite.py); here we check, in milliseconds, that each one
is a well-formed project whose expectations name real features.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from tfrepro.project import Project

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "tfrepro" / "examples"
REQUIRED = {
    "demo",
    "fp16_custom_layer",
    "slow_callback",
    "eager_debug",
    "loop_missing_training",
    "lr_batch_scaling",
    "interaction",
    "healthy",
    "flaky_nan",
    "memory_callback",
}
SYMPTOMS = {"nan", "crash", "timeout", "memory", "mismatch", "slowdown"}
EXAMPLES = sorted(p.name for p in EXAMPLES_DIR.iterdir() if (p / "expected.json").is_file())


def _expected(name: str) -> dict:
    return json.loads((EXAMPLES_DIR / name / "expected.json").read_text(encoding="utf-8"))


def test_every_required_example_is_there():
    assert REQUIRED <= set(EXAMPLES), f"missing: {sorted(REQUIRED - set(EXAMPLES))}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_loads_and_its_expectations_name_real_features(name):
    project = Project.load(EXAMPLES_DIR / name)
    exp = _expected(name)
    assert set(exp) >= {"symptom", "culprits", "status", "note"}
    assert exp["status"] in {"found", "none", "flaky"}
    assert exp["culprits"] == sorted(exp["culprits"])
    assert set(exp["culprits"]) <= set(project.feature_names)
    assert exp["note"].strip()
    if exp["status"] == "none":
        assert exp["culprits"] == [] and exp["symptom"] is None
    else:
        assert exp["symptom"] in SYMPTOMS and exp["culprits"]
    if exp["symptom"] == "mismatch":
        # a feature declared to change the loss on purpose cannot be the answer
        assert not set(exp["culprits"]) & project.affects_loss
    # enough harmless features around the culprits for the search to work at
    assert 4 <= len(project.feature_names) <= 8
    assert len(project.feature_names) - len(exp["culprits"]) >= 3


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_is_written_as_its_baseline(name):
    """`python repro.py` runs the healthy baseline: every feature OFF as written."""
    project = Project.load(EXAMPLES_DIR / name)
    assert set(project.states_in_files().values()) == {False}
    for rel, text in project.render(set()).items():
        assert text == (project.root / rel).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_variant_is_plain_tensorflow_python(name):
    project = Project.load(EXAMPLES_DIR / name)
    everything = set(project.feature_names)
    for enabled in (set(), everything):
        for rel, text in project.render(enabled).items():
            tree = ast.parse(text, filename=rel)
            imported = {
                alias.name.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
            }
            assert "tfrepro" not in imported
            assert imported <= {"keras", "numpy", "tensorflow", "tempfile", "time", "random", "os", "math"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_script_runs_as_many_steps_as_a_trial(name):
    """The manifest caps trials at `steps`; run alone, the script stops there too."""
    project = Project.load(EXAMPLES_DIR / name)
    steps = project.manifest.trial.steps
    assert steps <= 50
    text = (project.root / project.manifest.trial.entry).read_text(encoding="utf-8")
    m = re.search(r"^STEPS = (\d+)$", text, re.MULTILINE)
    assert m and int(m.group(1)) == steps


# -- the benchmark's scoring (benchmarks/bisect_suite.py), pure ----------------------


def _suite():
    import importlib.util

    path = EXAMPLES_DIR.parent.parent / "benchmarks" / "bisect_suite.py"
    spec = importlib.util.spec_from_file_location("bisect_suite", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


GOOD = {
    "status": "found",
    "symptom": "nan",
    "culprits": ["custom_norm", "mixed_precision"],
    "baseline": {},
    "trials": 7,
    "wall_s": 41.2,
    "run_dir": ".tfrepro/runs/x",
    "first_bad_commit": None,
}


def test_suite_contract_check_accepts_the_contract_example_and_names_each_break():
    suite = _suite()
    assert suite.contract_problems(GOOD) == []
    assert suite.contract_problems({**GOOD, "culprits": ["b", "a"]}) == ["'culprits' is not sorted: ['b', 'a']"]
    assert suite.contract_problems({k: v for k, v in GOOD.items() if k != "trials"}) == ["missing key 'trials'"]
    assert suite.contract_problems({**GOOD, "status": "maybe"})[0].startswith("'status' should be")
    assert suite.contract_problems({**GOOD, "flaky": "yes"}) == ["'flaky' should be a boolean, got 'yes'"]


def test_suite_scores_culprits_exactly_and_flaky_only_as_flaky():
    suite = _suite()
    fp16 = _expected("fp16_custom_layer")
    assert suite.is_right(fp16, GOOD)
    assert not suite.is_right(fp16, {**GOOD, "culprits": ["mixed_precision"]})  # not the whole pair
    assert not suite.is_right(fp16, {**GOOD, "symptom": "crash"})
    assert not suite.is_right(fp16, {**GOOD, "flaky": True})
    flaky = _expected("flaky_nan")
    found = {**GOOD, "culprits": ["shard_shuffle"]}
    assert not suite.is_right(flaky, found)  # a confident culprit from a coin flip is wrong
    assert suite.is_right(flaky, {**found, "flaky": True, "reproduction_rate": 0.5})
    assert suite.is_right(flaky, {**found, "culprits": [], "flaky": True})
    assert not suite.is_right(flaky, {**found, "culprits": ["cache"], "flaky": True})
    healthy = _expected("healthy")
    assert suite.is_right(healthy, {**GOOD, "status": "none", "symptom": None, "culprits": []})
    assert not suite.is_right(healthy, GOOD)
