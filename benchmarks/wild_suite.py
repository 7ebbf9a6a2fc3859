"""Run tfrepro zero-edit on the wild suite: training scripts written by others.

Each case under benchmarks/wild/<case>/ holds a `train.py` modelled on a
public script (keras-io examples and guides, TensorFlow tutorials, scripts
from bug reports: its `source` in expected.json), changed only to run
offline and small (synthetic data of the same shapes), with one planted
problem or none, and an `expected.json`:

    {"symptom": "slowdown"|...|null, "culprits": [...], "source": "...", "note": "...",
     "args": ["--epochs", "2"],          # optional: the script's own arguments (after --)
     "accept": ["untestable"],           # optional: other right statuses (e.g. a loop it cannot see)
     "or_symptom": "slowdown",           # optional: another right symptom, with the same culprits
     "known_cost": true}                 # optional: the answer must carry known_cost

Each case is committed alone in a fresh temp git repository and run as a
user would: `tfrepro bisect train.py --json [-- ARGS]`. Right: the expected
symptom and culprits (a healthy case: `none`), or a status in `accept`; a
culprit other than the expected one is a false culprit; the tree must stay
clean. The helpers (repositories, scoring table) are the journey suite's.

    .venv/bin/python benchmarks/wild_suite.py
    .venv/bin/python benchmarks/wild_suite.py --case callbacks_guide_slow --runs 3 --json-out wild.json

Exit code 0 when every run is right with a clean tree, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES = HERE / "wild"


def _journey():
    spec = importlib.util.spec_from_file_location("journey_suite", HERE / "journey_suite.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


J = _journey()


def score(out: Any, doc: dict[str, Any], want: dict[str, Any]) -> None:
    """The journey suite's scoring, plus `accept` and `known_cost`."""
    J.score(out, doc, want)
    status = doc.get("status")
    other = want.get("or_symptom")  # a second right symptom (the same culprits)
    if not out.right and other and status == "found" and doc.get("symptom") == other:
        J.score(out, doc, {**want, "symptom": other})
    if not out.right and status in (want.get("accept") or []):
        out.right, out.false_culprit = True, False
    if want.get("known_cost") and status == "found" and out.right and not doc.get("known_cost"):
        out.right = False
        out.got += " (no known_cost)"
    if status == "untestable":
        out.got = f"untestable: {str(doc.get('reason', ''))[:50]}"
    if status == "flaky":  # the symptom and the suspects: a flaky run is diagnosable without --keep
        suspects = ",".join(sorted(doc.get("suspects") or [])) or "-"
        out.got = f"flaky: {doc.get('symptom')} (suspects {suspects}, rate {doc.get('reproduction_rate')})"
        out.error = str(doc.get("error") or "")[:300]


def run_case(case: Path, timeout: float, keep: bool) -> Any:
    want = json.loads((case / "expected.json").read_text())
    out = J.Outcome(case.name, "zero-edit", J.describe(want["symptom"], want["culprits"]))
    env = J.child_env()
    with J.case_repo(case, prefix="wild", message="a training script", env=env, keep=keep) as repo:
        args = list(want.get("args") or [])
        cmd = [sys.executable, "-m", "tfrepro", "bisect", "train.py", "--json", *(["--", *args] if args else [])]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, check=False, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
            doc = J.last_json(proc.stdout)
            if doc is None:
                out.got = f"no JSON (exit {proc.returncode})"
                out.error = proc.stderr.strip()[-300:]
            else:
                score(out, doc, want)
                if doc.get("status") not in ("error", "flaky"):
                    out.error = ""
                elif doc.get("status") == "error":
                    out.error = str(doc.get("error") or "")[:300]
        except subprocess.TimeoutExpired:
            out.got = f"timeout after {timeout:.0f}s"
        out.wall_s = round(time.monotonic() - start, 1)
        out.git_status, touched = J.tree_status(repo, env)
        out.git_clean, out.git_extra = not touched, sorted(touched)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="", help="comma-separated case names (default: every case)")
    ap.add_argument("--runs", type=int, default=1, help="runs of each case")
    ap.add_argument("--timeout", type=float, default=2400.0, help="seconds per tfrepro command")
    ap.add_argument("--json-out", type=Path, help="write every outcome to this JSON file")
    ap.add_argument("--keep", action="store_true", help="keep the temp repositories (paths on stderr)")
    args = ap.parse_args(argv)
    cases = sorted(p for p in CASES.iterdir() if (p / "train.py").is_file() and (p / "expected.json").is_file())
    if args.case:
        names = set(args.case.split(","))
        if missing := names - {c.name for c in cases}:
            ap.error(f"unknown case(s): {', '.join(sorted(missing))}")
        cases = [c for c in cases if c.name in names]
    rows = []
    for run in range(args.runs):
        for case in cases:
            print(f"{case.name} [run {run + 1}] ...", file=sys.stderr, flush=True)
            row = run_case(case, args.timeout, args.keep)
            print(f"  -> {row.got} ({row.wall_s:.0f}s){'  ' + row.error if row.error else ''}", file=sys.stderr)
            rows.append(row)
    print(J.table(rows))
    right = sum(r.right for r in rows)
    false = sum(r.false_culprit for r in rows)
    dirty = sum(not r.git_clean for r in rows)
    print(f"\n{right}/{len(rows)} right, {false} false culprit(s), {dirty} dirty tree(s)")
    if args.json_out:
        args.json_out.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0 if right == len(rows) and not dirty else 1


if __name__ == "__main__":
    sys.exit(main())
