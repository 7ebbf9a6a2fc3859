"""`tfrepro new --from train.py` on the journey suite: does the new project's
bisect give the same answer as the original script's (issue 27)?

For each case under benchmarks/journey/<case>/ (see journey_suite.py for the
layout and `expected.json`), train.py is committed alone in a fresh temp git
repository, then:

    original   tfrepro bisect train.py --json              (zero-edit, the script as it is)
    new        tfrepro new --from train.py NEW --json      (NEW outside the repository)
    runs       python repro.py                             (in NEW: the baseline must run)
    from-new   tfrepro bisect --json                       (in NEW)

and the row says whether (status, symptom, culprits) match, next to the
expected answer, and whether the user's repository stayed clean. Each row is
printed (and, with --json-out, appended) as soon as it is done, so a partial
run keeps what it measured.

    nice -n 10 .venv/bin/python benchmarks/new_from.py
    .venv/bin/python benchmarks/new_from.py --case healthy,custom_softmax_nan --json-out new_from.jsonl

Exit code 0 when every case matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from journey_suite import CASES, child_env, describe, git, last_json  # noqa: E402


@dataclass
class Row:
    case: str
    expected: str
    original: str = ""
    new_from: str = ""
    data: str = ""
    repro_runs: bool = False
    match: bool = False
    git_clean: bool = False
    wall_s: float = 0.0
    error: str = ""


def answer(doc: dict | None, proc: subprocess.CompletedProcess) -> str:
    if doc is None:
        return f"no JSON (exit {proc.returncode})"
    if doc.get("status") == "found":
        return describe(doc.get("symptom"), sorted(doc.get("culprits") or []))
    if doc.get("status") == "error":
        return f"error: {str(doc.get('error', ''))[:60]}"
    return str(doc.get("status"))


def run(cmd: list[str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = subprocess.run(cmd, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout, check=False)
    return proc, last_json(proc.stdout)


def run_case(case: Path, timeout: float) -> Row:
    want = json.loads((case / "expected.json").read_text())
    row = Row(case.name, describe(want["symptom"], want["culprits"]))
    tfrepro = [sys.executable, "-m", "tfrepro"]
    tmp = Path(tempfile.mkdtemp(prefix=f"new-from-{case.name}-"))
    repo, new = tmp / case.name, tmp / "new"
    repo.mkdir()
    start = time.monotonic()
    try:
        env = child_env()
        shutil.copy2(case / "train.py", repo / "train.py")
        git(repo, "init", "-q", "-b", "main", env=env)
        git(repo, "add", "train.py", env=env)
        git(repo, "commit", "-q", "-m", "my training script", env=env)
        proc, doc = run([*tfrepro, "bisect", "train.py", "--json"], repo, timeout)
        row.original = answer(doc, proc)
        proc, doc = run([*tfrepro, "new", "--from", "train.py", str(new), "--json"], repo, timeout)
        if proc.returncode != 0 or doc is None:
            row.error = f"new --from exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
            return row
        row.data = str(doc.get("data"))
        ran = subprocess.run(
            [sys.executable, "repro.py"], cwd=new, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        row.repro_runs = ran.returncode == 0
        if not row.repro_runs:
            row.error = f"python repro.py exit {ran.returncode}: {ran.stderr.strip()[-200:]}"
        proc, doc = run([*tfrepro, "bisect", "--json"], new, timeout)
        row.new_from = answer(doc, proc)
        row.match = row.new_from == row.original and not row.original.startswith(("no JSON", "error"))
        row.git_clean = git(repo, "status", "--porcelain", "--untracked-files=all", env=env).strip() == ""
    except subprocess.TimeoutExpired as e:
        row.error = f"timeout after {timeout:.0f}s: {' '.join(map(str, e.cmd[-3:]))}"
    finally:
        row.wall_s = round(time.monotonic() - start, 1)
        shutil.rmtree(tmp, ignore_errors=True)
    return row


HEAD = (
    "case",
    "expected",
    "original (zero-edit)",
    "new --from",
    "data",
    "repro.py runs",
    "match",
    "git clean",
    "wall s",
)


def cells(r: Row) -> tuple[str, ...]:
    yes = {True: "yes", False: "NO"}
    return (
        r.case,
        r.expected,
        r.original,
        r.new_from or r.error[:60],
        r.data or "-",
        yes[r.repro_runs],
        yes[r.match],
        yes[r.git_clean],
        f"{r.wall_s:.0f}",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", help="comma-separated case names (default: every case)")
    ap.add_argument("--timeout", type=float, default=1200.0, help="per command, seconds")
    ap.add_argument("--json-out", type=Path, help="append one JSON line per case here")
    args = ap.parse_args()
    names = args.case.split(",") if args.case else sorted(p.name for p in CASES.iterdir() if p.is_dir())
    rows = []
    print("| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD), flush=True)
    for name in names:
        r = run_case(CASES / name, args.timeout)
        rows.append(r)
        print("| " + " | ".join(cells(r)) + " |", flush=True)
        if args.json_out:
            with open(args.json_out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(r)) + "\n")
    matched = sum(r.match for r in rows)
    print(f"\n{matched}/{len(rows)} cases: the new project's bisect gives the original script's answer")
    return 0 if matched == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
