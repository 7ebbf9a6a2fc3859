"""The warm fixed cost per trial of two source trees, side by side in one run.

A code change meant to cut the warm fixed cost (wall − training of a warm
trial) is measured against the code before it, interleaved: round r runs
`--trials` warm trials of the example's baseline with tree A, then with tree
B (B then A in odd rounds), each side in a fresh process with its own warm
server (started by a warm-up trial that is not counted). Per side: the
median fixed cost over all its counted trials, and B/A of the per-round
medians; the load average before and after.

    .venv/bin/python benchmarks/warm_cost_ab.py --a /tmp/wt-base --b . [--rounds 4] [--trials 5] [--example demo]

Each tree is used through `PYTHONPATH=<tree>` from the tree's own directory,
so its `tfrepro` is imported (the installed one is not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SIDE = r"""
import json, shutil, sys, tempfile, time
from dataclasses import replace
from pathlib import Path
import tfrepro
from tfrepro.project import Project
from tfrepro.trials import warm
from tfrepro.trials.runner import TrialOptions, run_variant

example, n = sys.argv[1], int(sys.argv[2])
proj = Project.load(Path(tfrepro.__file__).parent / "examples" / example)
settings = replace(proj.manifest.trial, deterministic=True, timeout_s=300)
pool = warm.WarmPool()
fixed = []
with tempfile.TemporaryDirectory() as tmp:
    for i in range(n + 1):
        variant = Path(tmp) / f"variant{i}"
        proj.write_variant((), variant)
        start = time.perf_counter()
        result = run_variant(variant, settings, Path(tmp) / f"trial{i}", TrialOptions(), warm_pool=pool)
        wall = time.perf_counter() - start
        assert result.extra.get("process") == "warm", result.extra.get("process")
        if i:
            fixed.append(wall - sum(result.step_times))
pool.close()
print(json.dumps({"fixed": fixed, "tfrepro": tfrepro.__file__}))
"""


def side(tree: Path, example: str, trials: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-c", SIDE, example, str(trials)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(doc["tfrepro"]).resolve().is_relative_to(tree.resolve()), doc["tfrepro"]
    return doc["fixed"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the tree before the change")
    ap.add_argument("--b", type=Path, required=True, help="the tree with the change")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--example", default="demo")
    args = ap.parse_args()
    load0 = os.getloadavg()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    got: dict[str, list[list[float]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            got[name].append(side(trees[name], args.example, args.trials))
            med = statistics.median(got[name][-1])
            print(f"round {r} {name}: fixed cost median {med:.3f} s  ({', '.join(f'{x:.3f}' for x in got[name][-1])})")
    load1 = os.getloadavg()
    print(f"A = {trees['A']}\nB = {trees['B']}")
    for name in ("A", "B"):
        flat = [x for rnd in got[name] for x in rnd]
        print(f"median {name}: {statistics.median(flat):.3f} s over {len(flat)} warm trials")
    ratios = [statistics.median(b) / statistics.median(a) for a, b in zip(got["A"], got["B"], strict=True)]
    print(f"B/A per round: {', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}")
    print(
        f"load average (1, 5, 15 min): before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
