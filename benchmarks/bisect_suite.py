"""Run `tfrepro bisect --json` on every bundled example and score the answers.

Each example under tfrepro/examples/ has a planted bug and an expected.json:
{"symptom", "culprits", "status": "found"|"none"|"flaky", "note"}. For each
one, the suite copies the project into a temp dir (the bisect writes its runs
under the project's .tfrepro/), runs the real CLI in a subprocess, checks the
printed object against Contract 4 (keys and types), compares it with the
expectation, and prints a table plus the accuracy.

    .venv/bin/python benchmarks/bisect_suite.py                # all examples, one at a time
    .venv/bin/python benchmarks/bisect_suite.py --only demo,healthy
    .venv/bin/python benchmarks/bisect_suite.py --jobs 2 --save out.json

`--jobs` > 1 runs examples concurrently: faster, but slowdown examples are
then timed while other trials load the CPU, which is what the bisect's
statistics must survive, not what a fair measurement looks like. The exit
code is 0 when every answer is right, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "tfrepro" / "examples"
STATUSES = {"found", "none", "untestable", "flaky", "ambiguous", "baseline-fails", "error"}  # Contract 4
SYMPTOMS = {"nan", "crash", "timeout", "memory", "mismatch", "slowdown"}


# -- Contract 4 ---------------------------------------------------------------------


def contract_problems(doc: Any) -> list[str]:
    """What in a `bisect --json` object breaks Contract 4 (empty: none)."""
    if not isinstance(doc, dict):
        return [f"not a JSON object but {type(doc).__name__}"]
    problems = []

    def check(key: str, ok: bool, want: str) -> None:
        if key not in doc:
            problems.append(f"missing key {key!r}")
        elif not ok:
            problems.append(f"{key!r} should be {want}, got {doc[key]!r:.80}")

    status, culprits = doc.get("status"), doc.get("culprits")
    check("status", status in STATUSES, "one of " + "/".join(sorted(STATUSES)))
    check("symptom", doc.get("symptom") is None or doc.get("symptom") in SYMPTOMS, "a symptom or null")
    check(
        "culprits", isinstance(culprits, list) and all(isinstance(c, str) for c in culprits), "a list of feature names"
    )
    if isinstance(culprits, list) and culprits != sorted(culprits, key=str):
        problems.append(f"'culprits' is not sorted: {culprits}")
    check("baseline", isinstance(doc.get("baseline"), dict) or doc.get("baseline") is None, "a trial summary object")
    check(
        "trials",
        isinstance(doc.get("trials"), int) and not isinstance(doc.get("trials"), bool) and doc.get("trials", -1) >= 0,
        "a count",
    )
    check("wall_s", isinstance(doc.get("wall_s"), (int, float)) and not isinstance(doc.get("wall_s"), bool), "seconds")
    check("run_dir", isinstance(doc.get("run_dir"), str) or doc.get("run_dir") is None, "a path")
    check("first_bad_commit", doc.get("first_bad_commit") is None, "null in feature mode")
    if "flaky" in doc and not isinstance(doc["flaky"], bool):
        problems.append(f"'flaky' should be a boolean, got {doc['flaky']!r}")
    rate = doc.get("reproduction_rate")
    if rate is not None and not (isinstance(rate, (int, float)) and 0 <= rate <= 1):
        problems.append(f"'reproduction_rate' should be in [0, 1] or null, got {rate!r}")
    if status == "found" and isinstance(culprits, list) and not culprits and not doc.get("flaky"):
        problems.append("status 'found' with no culprit")
    return problems


# -- scoring ----------------------------------------------------------------------


def expectation_text(exp: dict) -> str:
    if exp["status"] == "none":
        return "none"
    prefix = "flaky " if exp["status"] == "flaky" else ""
    return f"{prefix}{exp['symptom']}: {', '.join(exp['culprits'])}"


def answer_text(doc: dict | None) -> str:
    if doc is None:
        return "(no JSON)"
    status = doc.get("status")
    if status != "found" and not doc.get("flaky"):
        return str(status)
    rate = doc.get("reproduction_rate")
    flaky = (
        f"flaky ({rate:.2f}) "
        if doc.get("flaky") and isinstance(rate, (int, float))
        else ("flaky " if doc.get("flaky") else "")
    )
    return f"{flaky}{doc.get('symptom')}: {', '.join(doc.get('culprits') or []) or '-'}"


def is_right(exp: dict, doc: dict | None) -> bool:
    """Right answer: the planted culprits for the planted symptom; `none` for a
    healthy project; for a flaky one, the word flaky (naming the planted
    culprit or nobody, never another feature)."""
    if doc is None:
        return False
    if exp["status"] == "none":
        return doc.get("status") == "none" and not doc.get("flaky")
    if exp["status"] == "flaky":
        return (
            bool(doc.get("flaky"))
            and doc.get("symptom") in (exp["symptom"], None)
            and set(doc.get("culprits") or []) <= set(exp["culprits"])
        )
    return (
        doc.get("status") == "found"
        and not doc.get("flaky")
        and doc.get("symptom") == exp["symptom"]
        and list(doc.get("culprits") or []) == exp["culprits"]
    )


# -- running ----------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    expected: dict
    doc: dict | None = None
    exit_code: int | None = None
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return is_right(self.expected, self.doc) and not self.problems


def run_example(name: str, *, timeout_s: float, keep: Path | None, extra_args: list[str]) -> Outcome:
    src = EXAMPLES / name
    out = Outcome(name, json.loads((src / "expected.json").read_text(encoding="utf-8")))
    tmp = Path(tempfile.mkdtemp(prefix=f"tfrepro-suite-{name}-"))
    project = tmp / name
    shutil.copytree(src, project, ignore=shutil.ignore_patterns(".tfrepro", "__pycache__"))
    cmd = [sys.executable, "-m", "tfrepro", "bisect", "--json", *extra_args, str(project)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
    except subprocess.TimeoutExpired:
        out.wall_s = time.perf_counter() - t0
        out.problems.append(f"bisect did not finish within {timeout_s:.0f} s")
        return out
    out.wall_s = time.perf_counter() - t0
    out.exit_code = proc.returncode
    out.stderr_tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
    try:
        out.doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        out.problems.append("stdout is not exactly one JSON object")
    if out.doc is not None:
        out.problems += contract_problems(out.doc)
        status = out.doc.get("status")
        want_rc = {"found": 0, "none": 3, "flaky": 4, "ambiguous": 4, "baseline-fails": 1, "error": 1}.get(status)
        if want_rc is not None and proc.returncode != want_rc:
            out.problems.append(f"exit code {proc.returncode} for status {status!r} (expected {want_rc})")
    if keep is not None:
        shutil.copytree(project, keep / name, dirs_exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


# -- printing ---------------------------------------------------------------------


def machine() -> str:
    try:
        from importlib.metadata import version

        tf = version("tensorflow")
    except Exception:
        tf = "?"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, TensorFlow {tf}, load average at start {load:.1f}"
    )


def table(outcomes: list[Outcome]) -> str:
    rows = [("example", "expected", "found", "trials", "wall s", "ok?")]
    for o in outcomes:
        trials = o.doc.get("trials") if o.doc else None
        rows.append(
            (
                o.name,
                expectation_text(o.expected),
                answer_text(o.doc),
                "-" if trials is None else str(trials),
                f"{o.wall_s:.0f}",
                "yes" if o.ok else "NO",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated example names (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="examples bisected at the same time (default 1)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per example (default 1800)")
    ap.add_argument("--save", type=Path, help="write every outcome (with the full result JSON) here")
    ap.add_argument("--keep", type=Path, help="keep each project copy with its .tfrepro/ runs under this dir")
    ap.add_argument("--bisect-arg", action="append", default=[], help="extra argument for tfrepro bisect")
    args = ap.parse_args(argv)

    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "expected.json").is_file())
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            ap.error(f"unknown example(s): {', '.join(unknown)}; known: {', '.join(names)}")
        names = [n for n in names if n in wanted]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)

    print(f"# bisect suite, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {machine()}; jobs={args.jobs}", flush=True)
    t0 = time.perf_counter()

    def one(name: str) -> Outcome:
        o = run_example(name, timeout_s=args.timeout, keep=args.keep, extra_args=args.bisect_arg)
        print(f"  {name}: {answer_text(o.doc)} in {o.wall_s:.0f} s -> {'ok' if o.ok else 'WRONG'}", flush=True)
        return o

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(one, names))
    total = time.perf_counter() - t0

    print()
    print(table(outcomes))
    print()
    right = sum(o.ok for o in outcomes)
    trials = sum(int(o.doc.get("trials") or 0) for o in outcomes if o.doc)
    print(f"accuracy: {right}/{len(outcomes)} right; {trials} trials; {total:.0f} s wall in total")
    for o in outcomes:
        for p in o.problems:
            print(f"  {o.name}: {p}")
        if not o.ok and o.stderr_tail:
            print(f"  {o.name} stderr (last lines):\n    " + o.stderr_tail.replace("\n", "\n    "))
    if args.save:
        args.save.write_text(
            json.dumps(
                [
                    {
                        "name": o.name,
                        "expected": o.expected,
                        "result": o.doc,
                        "exit_code": o.exit_code,
                        "wall_s": round(o.wall_s, 1),
                        "ok": o.ok,
                        "problems": o.problems,
                    }
                    for o in outcomes
                ],
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    return 0 if right == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
