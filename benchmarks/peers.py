"""tfrepro against a peer, mlbisect, on the same cases, in one run.

mlbisect (`pip install 'tfrepro[bench]'`) is noisy-regression delta debugging
over configuration axes with adaptive sampling: it runs a command once per
sample with `MLBISECT_AXIS_<NAME>` set to an axis's old or new value and reads
a metric from the command's last stdout line. Here its axes are the features
tfrepro detects in the project (`tfrepro features --json`), old = "0" (OFF) and
new = "1" (ON), and its command is this file's `wrap` mode: it maps those
environment variables (or `TFREPRO_FEATURE_<name>=0/1`) to a configuration,
runs exactly that trial with `tfrepro run PATH --with A,B --json --no-cache`
and prints one number, the trial's badness:

    BAD_FAILED (10.0)              the trial went non-finite, crashed or timed out
    log2(median step time in s)    otherwise (a 2x slowdown adds 1.0)

with `lower_is_better` and `min_effect` 1.0: a failure or a >= 2x slowdown is
a regression, whatever the symptom (mlbisect is not told which one to hunt,
as tfrepro is not). Both sides run every trial (`--no-cache`); one
`tfrepro run` is one trial, and tfrepro's trials are its bisect's `trials`.

    .venv/bin/python benchmarks/peers.py                   # the four cases
    .venv/bin/python benchmarks/peers.py --only demo --save out.json

A right answer: tfrepro's as in benchmarks/bisect_suite.py; mlbisect's is
status `culprit_found` with the planted culprits as its one culprit set, and
`no_reproducible_regression` for the healthy script.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "tfrepro" / "examples"
BAD_FAILED = 10.0
MIN_EFFECT = 1.0

# name, project, what the case is
CASES = [
    ("healthy", EXAMPLES / "healthy", "a healthy script"),
    ("demo", EXAMPLES / "demo", "a deterministic NaN"),
    ("eager_debug", EXAMPLES / "eager_debug", "a >= 3x slowdown"),
    ("fp16_custom_layer", EXAMPLES / "fp16_custom_layer", "an interacting pair (NaN)"),
]


# -- the wrapper: environment -> configuration -> one trial -> one number -----------


def axis_env(name: str) -> str:
    """mlbisect's variable for an axis (its names are ^[a-z][a-z0-9_]*$)."""
    return "MLBISECT_AXIS_" + name.upper()


def configuration_from_env(env: Mapping[str, str], features: list[str]) -> list[str]:
    """The features ON in this trial: `TFREPRO_FEATURE_<name>` or mlbisect's
    `MLBISECT_AXIS_<NAME>`, "1" ON and "0" OFF (absent: OFF)."""
    enabled = []
    for name in features:
        raw = env.get("TFREPRO_FEATURE_" + name, env.get(axis_env(name), "0")).strip()
        if raw not in ("0", "1"):
            raise ValueError(f"TFREPRO_FEATURE_{name}={raw!r}: expected 0 or 1")
        if raw == "1":
            enabled.append(name)
    return sorted(enabled)


def run_command(project: Path, enabled: list[str]) -> list[str]:
    """The `tfrepro run` command line of one trial of this configuration."""
    chosen = ["--with", ",".join(enabled)] if enabled else ["--none"]
    return [sys.executable, "-m", "tfrepro", "run", str(project), *chosen, "--repeats", "1", "--json", "--no-cache"]


def metric_from_summary(summary: Mapping[str, Any]) -> float:
    """The trial's badness (lower is better): BAD_FAILED for a non-finite
    loss, a crash or a timeout; else log2 of the median step time."""
    if summary.get("nonfinite") or summary.get("crashed") or summary.get("timed_out"):
        return BAD_FAILED
    step = summary.get("median_step_time")
    if not isinstance(step, (int, float)) or step <= 0:
        raise ValueError(f"the trial has no median step time: {summary.get('error')!r}")
    return math.log2(step)


def wrap(project: Path) -> int:
    """mlbisect's command: one trial, its metric as {"metric": x} on the last line."""
    features = json.loads(os.environ["PEERS_FEATURES"])
    enabled = configuration_from_env(os.environ, features)
    proc = subprocess.run(run_command(project, enabled), capture_output=True, text=True, check=False)
    try:
        summary = json.loads(proc.stdout)
        metric = metric_from_summary(summary)
    except ValueError as exc:  # JSONDecodeError too: mlbisect counts it a failed run
        print(f"peers wrap: {exc}\n{proc.stderr[-2000:]}", file=sys.stderr)
        return 3
    print(json.dumps({"metric": metric, "enabled": enabled}))
    return 0


# -- the two sides ------------------------------------------------------------------


@dataclass
class Side:
    answer: str
    right: bool
    trials: int | None
    wall_s: float
    note: str = ""


def detected_features(project: Path) -> list[str]:
    cmd = [sys.executable, "-m", "tfrepro", "features", "--json", str(project)]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return [f["name"] for f in doc["features"]]


def run_tfrepro(project: Path, expected: dict, timeout_s: float) -> Side:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bisect_suite import answer_text, is_right  # noqa: PLC0415 (a sibling script)

    cmd = [sys.executable, "-m", "tfrepro", "bisect", "--json", "--no-cache", str(project)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Side("(timed out)", False, None, time.perf_counter() - t0, f"over {timeout_s:.0f} s")
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return Side("(no JSON)", False, None, wall, proc.stderr.strip()[-300:])
    return Side(answer_text(doc), is_right(expected, doc), doc.get("trials"), wall)


def manifest(name: str, features: list[str], project: Path, budget: Mapping[str, int]) -> dict:
    wrapper = f"{sys.executable} {Path(__file__).resolve()} wrap {project}"
    return {
        "version": 1,
        "name": f"tfrepro-{name}",
        "metric": {"name": "badness", "direction": "lower_is_better", "min_effect": MIN_EFFECT},
        "run": {"command": wrapper, "timeout_s": 600, "workdir": str(project)},
        "axes": [{"name": f, "old": "0", "new": "1"} for f in features],
        "budget": dict(budget),
    }


def mlbisect_right(expected: dict, report: Mapping[str, Any]) -> bool:
    if expected["status"] == "none":
        return report.get("status") == "no_reproducible_regression"
    return report.get("status") == "culprit_found" and report.get("culprit_sets") == [sorted(expected["culprits"])]


def mlbisect_answer(report: Mapping[str, Any]) -> str:
    sets = report.get("culprit_sets") or report.get("tentative_culprit_sets") or []
    named = "; ".join(", ".join(s) for s in sets)
    return f"{report.get('status')}" + (f": {named}" if named else "")


def unsure(report: Mapping[str, Any]) -> str:
    """The configurations mlbisect could not judge with confidence (why it
    says inconclusive): their id, drop against the baseline and samples."""
    shown = []
    for c in report.get("configurations") or []:
        if c.get("verdict") == "UNDECIDED" or c.get("low_confidence"):
            drop = "?" if c.get("drop") is None else f"{c['drop']:.2f}"
            shown.append(f"{c['id']} {c['verdict']} drop {drop} n={c['n']}")
    return "; unsure: " + ", ".join(shown) if shown else ""


def run_mlbisect(name: str, project: Path, budget: Mapping[str, int], expected: dict, timeout_s: float) -> Side:
    import yaml  # noqa: PLC0415 (mlbisect's own dependency, the bench extra)

    features = detected_features(project)
    work = project.parent / "mlbisect"
    work.mkdir()
    (work / "mlbisect.yaml").write_text(yaml.safe_dump(manifest(name, features, project, budget)), encoding="utf-8")
    report_path = work / "report.json"
    cmd = [sys.executable, "-m", "mlbisect.cli", "run", str(work / "mlbisect.yaml"), "--json", str(report_path)]
    cmd += ["--out", str(work / "report.md")]
    env = {**os.environ, "PEERS_FEATURES": json.dumps(features)}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=work, check=False)
    except subprocess.TimeoutExpired:
        return Side("(timed out)", False, _runs_logged(work), time.perf_counter() - t0, f"over {timeout_s:.0f} s")
    wall = time.perf_counter() - t0
    if not report_path.exists():
        return Side("(no report)", False, _runs_logged(work), wall, proc.stderr.strip()[-300:])
    report = json.loads(report_path.read_text(encoding="utf-8"))
    failed = sum(1 for line in _log_lines(work) if not json.loads(line).get("ok"))
    note = f"{len(features)} axes; {failed} failed runs" if failed else f"{len(features)} axes"
    note += unsure(report)
    return Side(mlbisect_answer(report), mlbisect_right(expected, report), report["runs"]["used"], wall, note)


class TrialExecutor:
    """mlbisect's Executor, in this process: the environment mlbisect's own
    LocalExecutor would set (`MLBISECT_AXIS_<NAME>` = "0"/"1"), mapped by the
    same `configuration_from_env` as `wrap`, then one tfrepro trial (warm, as
    a bisect's trials are; never cached: `repeat` = mlbisect's seed)."""

    def __init__(self, project: Path, features: list[str]) -> None:
        from tfrepro.project import Project  # noqa: PLC0415

        self.project = Project.load(project)
        self.features = features
        self.trials = 0

    def run(self, config: Any, seed: int) -> Any:
        from dataclasses import replace  # noqa: PLC0415

        from mlbisect.executors.base import RunResult  # noqa: PLC0415

        from tfrepro.trials.runner import TrialOptions, run_trial  # noqa: PLC0415
        from tfrepro.trials.values import summary  # noqa: PLC0415

        env = {axis_env(f): "1" if f in config.axes else "0" for f in self.features}
        enabled = configuration_from_env(env, self.features)
        settings = replace(self.project.manifest.trial, repeat=1000 + seed)
        t0 = time.perf_counter()
        self.trials += 1
        doc = summary(run_trial(self.project, enabled, settings, TrialOptions(use_cache=False, label="mlbisect")))
        try:
            metric, error = metric_from_summary(doc), None
        except ValueError as exc:
            metric, error = None, str(exc)
        wall = time.perf_counter() - t0
        return RunResult(config.axes, seed, metric, error is None, wall, error)


def run_mlbisect_here(name: str, project: Path, budget: Mapping[str, int], expected: dict) -> Side:
    from mlbisect.manifest import Manifest  # noqa: PLC0415
    from mlbisect.report import build_report  # noqa: PLC0415
    from mlbisect.sampler import AdaptiveSampler  # noqa: PLC0415
    from mlbisect.search import find_culprits  # noqa: PLC0415

    features = detected_features(project)
    man = Manifest.model_validate(manifest(name, features, project, budget))
    t0 = time.perf_counter()
    executor = TrialExecutor(project, features)
    result = find_culprits(executor, man, sampler=AdaptiveSampler(executor, man))
    wall = time.perf_counter() - t0
    report = build_report(man, result)
    note = f"{len(features)} axes, {result.configurations_tested} configurations"
    if executor.trials != result.runs_used:
        note += f"; {executor.trials} trials run"
    note += unsure(report)
    return Side(mlbisect_answer(report), mlbisect_right(expected, report), result.runs_used, wall, note)


def _log_lines(work: Path) -> list[str]:
    log = work / ".mlbisect" / "runs.jsonl"
    return [ln for ln in log.read_text(encoding="utf-8").splitlines() if ln.strip()] if log.exists() else []


def _runs_logged(work: Path) -> int:
    return len(_log_lines(work))


# -- the run ------------------------------------------------------------------------


def run_case(name: str, src: Path, budget: Mapping[str, int], timeout_s: float, via: str) -> dict:
    expected = json.loads((src / "expected.json").read_text(encoding="utf-8"))
    row: dict[str, Any] = {"case": name, "expected": expected}
    for side in ("tfrepro", "mlbisect"):
        tmp = Path(tempfile.mkdtemp(prefix=f"tfrepro-peers-{name}-{side}-"))
        project = tmp / name
        shutil.copytree(src, project, ignore=shutil.ignore_patterns(".tfrepro", "__pycache__"))
        if side == "tfrepro":
            result = run_tfrepro(project, expected, timeout_s)
        elif via == "cli":
            result = run_mlbisect(name, project, budget, expected, timeout_s)
        else:
            result = run_mlbisect_here(name, project, budget, expected)
        row[side] = asdict(result)
        print(
            f"  {name} {side}: {result.answer} right={result.right} trials={result.trials} "
            f"{result.wall_s:.0f} s {result.note}",
            file=sys.stderr,
            flush=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| case | planted | tfrepro: answer | right | trials | wall | mlbisect: answer | right | runs | wall |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        t, m, exp = row["tfrepro"], row["mlbisect"], row["expected"]
        planted = "none" if exp["status"] == "none" else f"{exp['symptom']}: {', '.join(exp['culprits'])}"
        cells = [row["case"], planted]
        for side in (t, m):
            trials = "?" if side["trials"] is None else str(side["trials"])
            answer = side["answer"] + (f" ({side['note']})" if side["note"] else "")
            cells += [answer, "yes" if side["right"] else "**no**", trials, f"{side['wall_s']:.0f} s"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="bench", choices=["bench", "wrap"])
    ap.add_argument("project", nargs="?", help="wrap mode: the project to run")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per side and case")
    ap.add_argument("--baseline-runs", type=int, default=3, help="mlbisect: baseline samples (its default: 5)")
    ap.add_argument("--min-runs", type=int, default=3, help="mlbisect: samples per configuration, at least")
    ap.add_argument("--max-runs-per-config", type=int, default=5, help="mlbisect: samples per configuration, at most")
    ap.add_argument("--max-runs", type=int, default=60, help="mlbisect: runs in all, at most")
    ap.add_argument(
        "--via",
        choices=["here", "cli"],
        default="here",
        help="mlbisect in this process with warm trials (here), or its CLI running `wrap` (cli: a cold "
        "`tfrepro run` per sample)",
    )
    ap.add_argument("--save", type=Path, help="write the rows as JSON")
    args = ap.parse_args(argv)
    if args.mode == "wrap":
        return wrap(Path(args.project))
    budget = {
        "baseline_runs": args.baseline_runs,
        "min_runs_per_config": args.min_runs,
        "max_runs_per_config": args.max_runs_per_config,
        "max_runs": args.max_runs,
        "batch_size": 2,
    }
    only = {s for s in args.only.split(",") if s}
    rows = [run_case(n, src, budget, args.timeout, args.via) for n, src, _ in CASES if not only or n in only]
    print(table(rows))
    if args.save:
        args.save.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0 if all(r["tfrepro"]["right"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
