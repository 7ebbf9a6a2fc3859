"""Run tfrepro on the journey suite: unmarked user scripts, as users write them.

Each case under benchmarks/journey/<case>/ holds a `train.py` adapted from a
public bug report (no tfrepro markers, no tfrepro import) and an
`expected.json`: {"symptom": "nan"|...|null, "culprits": [...], "source", "note"}.
For each case and mode, the runner commits train.py alone in a fresh temp git
repository (isolated git config, fixed dates), runs the tfrepro of the current
interpreter there and scores the one JSON object `bisect --json` prints:

    zero-edit  tfrepro bisect train.py --json           (the user's file as it is)
    annotate   tfrepro annotate train.py --write; tfrepro bisect . --json

Right: the expected symptom and culprits (a healthy case: status "none").
A case whose symptom is a cost of the machine's kernels (`"planted":
{"probe": "planted.py", "min_ratio": R}` in expected.json) is first measured
bare on this machine by its probe, which prints {"ratio": ...}: under R the
cost is not one tfrepro promises to find here, and `none` is right too (the
planted culprit as well; any other culprit is still a false culprit). The
table shows the measured ratio; the summary counts those runs apart.
A miss is acceptable only as none / flaky / a clear error; a culprit other than
the expected one is a false culprit. `git status --porcelain` after the run
must be empty in zero-edit mode and touch only train.py and tfrepro.toml in
annotate mode.

    .venv/bin/python benchmarks/journey_suite.py
    .venv/bin/python benchmarks/journey_suite.py --case healthy,cache_after_shuffle --modes annotate
    .venv/bin/python benchmarks/journey_suite.py --json-out journey.json

Exit code 0 when every run is right with a clean tree, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# a sibling module; `git` too is the wild suite's through this one
from _repos import case_repo, child_env, git, tree_status  # noqa: E402, F401

CASES = Path(__file__).resolve().parent / "journey"
MODES = ("zero-edit", "annotate")
ANNOTATE_MAY_TOUCH = {"train.py", "tfrepro.toml"}


@dataclass
class Outcome:
    case: str
    mode: str
    expected: str
    got: str = ""
    status: str = ""
    trials: int | None = None
    wall_s: float = 0.0
    right: bool = False
    false_culprit: bool = False
    git_clean: bool = False
    git_status: list[str] = field(default_factory=list)
    git_extra: list[str] = field(default_factory=list)  # what should not be there
    error: str = ""
    planted_ratio: float | None = None  # the probe's measure of the planted cost here
    below_threshold: bool = False  # under the case's min_ratio: `none` is right too


def probe_planted(case: Path, want: dict[str, Any], env: dict[str, str], timeout: float) -> float | None:
    """The planted cost on this machine, as the case's probe measures it bare."""
    planted = want.get("planted")
    if not planted:
        return None
    proc = subprocess.run(
        [sys.executable, str(case / planted["probe"])],
        check=False,
        cwd=case,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    doc = last_json(proc.stdout)
    if proc.returncode != 0 or doc is None:
        raise RuntimeError(f"{case.name}: its probe failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return float(doc["ratio"])


def describe(symptom: str | None, culprits: list[str]) -> str:
    return "healthy" if symptom is None and not culprits else f"{symptom}: {','.join(sorted(culprits)) or '-'}"


def last_json(stdout: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(stdout)
        return doc if isinstance(doc, dict) else None
    except json.JSONDecodeError:
        pass
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def score(out: Outcome, doc: dict[str, Any], want: dict[str, Any]) -> None:
    status, symptom = doc.get("status"), doc.get("symptom")
    culprits = sorted(doc.get("culprits") or [])
    out.status, out.trials = str(status), doc.get("trials")
    if status == "found":
        out.got = describe(symptom, culprits)
    elif status == "error":
        out.got = f"error: {str(doc.get('error', ''))[:60]}"
    else:
        out.got = str(status)
    if want["symptom"] is None:
        out.right = status == "none"
    else:
        out.right = status == "found" and symptom == want["symptom"] and culprits == sorted(want["culprits"])
        out.right = out.right or (out.below_threshold and status == "none")
    out.false_culprit = status == "found" and not out.right


def run_case(
    case: Path,
    mode: str,
    timeout: float,
    keep: bool,
    keep_wrong: Path | None = None,
    ratio: float | None = None,
    keep_over: int | None = None,
) -> Outcome:
    want = json.loads((case / "expected.json").read_text())
    out = Outcome(case.name, mode, describe(want["symptom"], want["culprits"]))
    if ratio is not None:
        out.planted_ratio, out.below_threshold = ratio, ratio < float(want["planted"]["min_ratio"])
        if out.below_threshold:
            out.expected += f" or none (planted {ratio:.2f}x here)"
        else:
            out.expected += f" (planted {ratio:.2f}x here)"
    env = child_env()
    tfrepro = [sys.executable, "-m", "tfrepro"]
    with case_repo(case, prefix="journey", message="my training script", env=env, keep=keep) as repo:
        start = time.monotonic()
        try:
            if mode == "annotate":
                ann = subprocess.run(
                    [*tfrepro, "annotate", "train.py", "--write"],
                    check=False,
                    cwd=repo,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                if ann.returncode != 0:
                    out.error = f"annotate exit {ann.returncode}: {ann.stderr.strip()[-200:]}"
            cmd = [*tfrepro, "bisect", "train.py" if mode == "zero-edit" else ".", "--json"]
            proc = subprocess.run(cmd, check=False, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
            doc = last_json(proc.stdout)
            if doc is None:
                out.got = f"no JSON (exit {proc.returncode})"
                out.error = out.error or proc.stderr.strip()[-300:]
            else:
                score(out, doc, want)
                if doc.get("status") == "error":
                    out.error = out.error or str(doc.get("error", ""))[:300]
        except subprocess.TimeoutExpired:
            out.got = f"timeout after {timeout:.0f}s"
        out.wall_s = round(time.monotonic() - start, 1)
        out.git_status, touched = tree_status(repo, env)
        out.git_clean = not touched if mode == "zero-edit" else touched <= ANNOTATE_MAY_TOUCH
        out.git_extra = sorted(touched if mode == "zero-edit" else touched - ANNOTATE_MAY_TOUCH)
        outlier = keep_over is not None and (out.trials or 0) > keep_over
        if keep_wrong is not None and (not out.right or outlier) and (repo / ".tfrepro" / "runs").is_dir():
            dest = keep_wrong / f"{case.name}-{mode}"
            shutil.copytree(repo / ".tfrepro" / "runs", dest, dirs_exist_ok=True)  # result.json, trials
            why = "a wrong answer" if not out.right else f"a right answer in {out.trials} trials"
            print(f"  kept the run of {why} in {dest}", file=sys.stderr)
    return out


def clean_label(r: Outcome) -> str:
    if r.git_clean:
        return "yes"
    if r.git_extra and all(p.startswith(".tfrepro/") for p in r.git_extra):
        return "NO (.tfrepro/ untracked)"
    return "NO: " + ", ".join(r.git_extra[:3])


def table(rows: list[Outcome]) -> str:
    head = ("case", "mode", "expected", "got", "trials", "wall s", "right?", "false culprit?", "git clean?")
    body = [
        (
            r.case,
            r.mode,
            r.expected,
            r.got,
            "-" if r.trials is None else str(r.trials),
            f"{r.wall_s:.1f}",
            "yes" if r.right else "NO",
            "YES" if r.false_culprit else "no",
            clean_label(r),
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="", help="comma-separated case names (default: every case)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per tfrepro command")
    ap.add_argument("--json-out", type=Path, help="write every outcome to this JSON file")
    ap.add_argument("--keep", action="store_true", help="keep the temp repositories (paths on stderr)")
    ap.add_argument(
        "--keep-wrong",
        type=Path,
        help="copy the .tfrepro/runs of every wrong answer here (result.json, trial summaries)",
    )
    ap.add_argument(
        "--keep-over",
        type=int,
        help="with --keep-wrong: also keep the runs of right answers that took more than this many trials",
    )
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in MODES]:
        ap.error(f"unknown mode(s): {', '.join(bad)}")
    cases = sorted(p for p in CASES.iterdir() if (p / "train.py").is_file() and (p / "expected.json").is_file())
    if args.case:
        names = set(args.case.split(","))
        if missing := names - {c.name for c in cases}:
            ap.error(f"unknown case(s): {', '.join(sorted(missing))}")
        cases = [c for c in cases if c.name in names]
    rows: list[Outcome] = []
    for case in cases:
        ratio = probe_planted(case, json.loads((case / "expected.json").read_text()), child_env(), args.timeout)
        if ratio is not None:
            print(f"{case.name}: planted cost {ratio:.3f}x on this machine (bare, its probe)", file=sys.stderr)
        for mode in modes:
            print(f"{case.name} [{mode}] ...", file=sys.stderr, flush=True)
            row = run_case(case, mode, args.timeout, args.keep, args.keep_wrong, ratio, args.keep_over)
            print(f"  -> {row.got} ({row.wall_s:.0f}s){'  ' + row.error if row.error else ''}", file=sys.stderr)
            rows.append(row)
    print(table(rows))
    right = sum(r.right for r in rows)
    false = sum(r.false_culprit for r in rows)
    dirty = sum(not r.git_clean for r in rows)
    print(
        f"\n{right}/{len(rows)} right, {false} false culprit(s), {dirty} dirty tree(s), "
        f"{sum(r.wall_s for r in rows):.0f} s in tfrepro"
    )
    if below := [r for r in rows if r.below_threshold]:
        print(
            f"{len(below)} of those runs on a case whose planted cost is under its min_ratio here "
            f"(`none` right too): " + ", ".join(f"{r.case} [{r.mode}] {r.got}" for r in below)
        )
    if args.json_out:
        args.json_out.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0 if right == len(rows) and not dirty else 1


if __name__ == "__main__":
    sys.exit(main())
