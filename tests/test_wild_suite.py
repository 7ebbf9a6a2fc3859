"""The wild suite's cases are what its runner promises: scripts with no
tfrepro in them and an expected.json it can score (benchmarks/wild_suite.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "benchmarks"
CASES = sorted(p for p in (ROOT / "wild").iterdir() if p.is_dir())


def _suite():
    spec = importlib.util.spec_from_file_location("wild_suite", ROOT / "wild_suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_is_a_plain_script_with_a_scorable_expectation(case):
    src = (case / "train.py").read_text()
    compile(src, str(case / "train.py"), "exec")
    assert "tfrepro" not in src
    want = json.loads((case / "expected.json").read_text())
    assert {"symptom", "culprits", "source", "note"} <= set(want)
    assert (want["symptom"] is None) == (not want["culprits"])
    assert want["culprits"] == sorted(want["culprits"])


def test_the_runner_scores_accepted_statuses_and_known_costs():
    suite = _suite()
    want = {"symptom": "slowdown", "culprits": ["mirrored_strategy"], "known_cost": True, "accept": ["none"]}

    def outcome():
        return suite.J.Outcome("c", "zero-edit", "slowdown <- mirrored_strategy")

    found = {"status": "found", "symptom": "slowdown", "culprits": ["mirrored_strategy"], "known_cost": {"reason": "x"}}
    for doc, right in [
        (found, True),
        ({**found, "known_cost": None}, False),  # the answer must say it is a known cost
        ({"status": "none"}, True),  # accepted
        ({"status": "found", "symptom": "slowdown", "culprits": ["prefetch"]}, False),
    ]:
        out = outcome()
        suite.score(out, doc, want)
        assert out.right is right, doc


def test_a_flaky_outcome_names_its_symptom_and_suspects():
    suite = _suite()
    out = suite.J.Outcome("c", "zero-edit", "healthy")
    doc = {"status": "flaky", "symptom": "memory", "suspects": ["prefetch", "cache"], "reproduction_rate": 0.5}
    suite.score(out, {**doc, "error": "the memory is flaky: ..."}, {"symptom": None, "culprits": []})
    assert not out.right and not out.false_culprit
    assert out.got == "flaky: memory (suspects cache,prefetch, rate 0.5)"
    assert out.error.startswith("the memory is flaky")
