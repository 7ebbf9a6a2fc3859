"""Warm (forked from a warm server) against cold trials, side by side in one run.

Two parts, every trial through the real runner (`run_variant`):

1. equivalence: every bundled example (`tfrepro/examples/*`), its baseline
   (all features OFF) and its failing configuration (all ON), seeded and
   deterministic, cold then warm: the per-step losses must be identical, the
   crash line and the first non-finite step too ("random": the script draws
   from OS entropy on purpose, and a second cold run differs as well);
2. cost: interleaved cold/warm pairs of one example's baseline. Per trial:
   wall (from asking for the trial to its result), training (sum of the
   harness's step times), fixed cost = wall − training. A/A timing: the ratio
   warm/cold of the median steady step time, per pair, and its median.

The first warm trial also pays the server's start (the TensorFlow import,
once per bisect): it is shown on its own line and left out of the medians.
Figures on a shared machine are noisy: read the ratios of interleaved pairs
and the load average printed with them.

    PYTHONPATH=. .venv/bin/python benchmarks/warm_vs_cold.py [--pairs 5] [--example demo] [--skip-equivalence]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tfrepro.project import Project
from tfrepro.trials import warm
from tfrepro.trials.runner import run_variant

EXAMPLES = Path(__file__).resolve().parents[1] / "tfrepro" / "examples"


def trial(proj: Project, enabled: tuple[str, ...], tmp: Path, tag: str, cold: bool, pool: warm.WarmPool):
    settings = replace(proj.manifest.trial, deterministic=True, timeout_s=300)
    variant = tmp / f"variant-{tag}"
    if not variant.exists():
        proj.write_variant(enabled, variant)
    start = time.perf_counter()
    result = run_variant(
        variant, settings, tmp / f"trial-{tag}-{'cold' if cold else 'warm'}", cold=cold, warm_pool=pool
    )
    wall = time.perf_counter() - start
    return result, wall


def same_losses(a, b) -> bool:
    """Bit for bit; a non-finite loss (stored as None, read back as NaN) equals another."""
    return [x.hex() if x == x else "nan" for x in a] == [x.hex() if x == x else "nan" for x in b]


def equivalence(tmp: Path, pool: warm.WarmPool, only: list[str]) -> bool:
    print("equivalence: cold vs warm, per example and configuration (seeded, deterministic)")
    print(f"{'example':24} {'config':9} {'steps':>5} {'losses':>9} {'crash/nan':>9}  processes")
    ok = True
    for ex in sorted(p for p in EXAMPLES.iterdir() if (p / "tfrepro.toml").exists()):
        if only and ex.name not in only:
            continue
        proj = Project.load(ex)
        names = tuple(sorted(proj.feature_names))
        for config, enabled in [("baseline", ()), ("all-on", names)]:
            tag = f"{ex.name}-{config}"
            cold, _ = trial(proj, enabled, tmp, tag, True, pool)
            hot, _ = trial(proj, enabled, tmp, tag, False, pool)
            same = same_losses(cold.losses, hot.losses)
            same_end = (cold.crashed, cold.error, cold.first_nonfinite_step, cold.timed_out) == (
                hot.crashed,
                hot.error,
                hot.first_nonfinite_step,
                hot.timed_out,
            )
            verdict = "identical" if same else "DIFFER"
            if not (same and same_end):  # random by design? then two cold runs differ too
                again, _ = trial(proj, enabled, tmp, tag + "-again", True, pool)
                if not same_losses(cold.losses, again.losses):
                    verdict, same, same_end = "random", True, True
            ok &= same and same_end and hot.extra.get("process") == "warm"
            print(
                f"{ex.name:24} {config:9} {len(cold.losses):5d} {verdict:>9} "
                f"{'same' if same_end else 'DIFFER':>9}  {cold.extra.get('process')}/{hot.extra.get('process')}"
            )
    return ok


def cost(tmp: Path, pool: warm.WarmPool, example: str, pairs: int) -> None:
    proj = Project.load(EXAMPLES / example)
    rows = []
    for i in range(pairs + 1):  # pair 0: warm-up (the warm side may start its server)
        for cold in (True, False) if i % 2 == 0 else (False, True):
            result, wall = trial(proj, (), tmp, f"cost{i}", cold, pool)
            train = sum(result.step_times)
            rows.append((i, "cold" if cold else "warm", wall, train, wall - train, result.median_step_time()))
    print(
        f"\ncost: {example} baseline, {pairs} interleaved pairs (pair 0: warm-up of both sides, the warm "
        "server's start if not started yet; not counted)"
    )
    print(f"{'pair':>4} {'process':7} {'wall s':>8} {'train s':>8} {'fixed s':>8} {'median step ms':>15}")
    for i, how, wall, train, fixed, med in rows:
        print(f"{i:4d} {how:7} {wall:8.3f} {train:8.3f} {fixed:8.3f} {med * 1000 if med else float('nan'):15.3f}")
    counted = [r for r in rows if r[0] > 0]
    for how in ("cold", "warm"):
        mine = [r for r in counted if r[1] == how]
        print(
            f"median {how}: wall {statistics.median(r[2] for r in mine):.3f} s, "
            f"training {statistics.median(r[3] for r in mine):.3f} s, "
            f"fixed cost {statistics.median(r[4] for r in mine):.3f} s"
        )
    ratios = []
    for i in range(1, pairs + 1):
        c = next(r for r in counted if r[0] == i and r[1] == "cold")
        w = next(r for r in counted if r[0] == i and r[1] == "warm")
        if c[5] and w[5]:
            ratios.append(w[5] / c[5])
    if ratios:
        print(
            f"A/A step time warm/cold, per pair: {', '.join(f'{r:.3f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.3f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--example", default="demo")
    ap.add_argument("--skip-equivalence", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average at start {os.getloadavg()}")
    pool = warm.WarmPool()
    ok = True
    try:
        with tempfile.TemporaryDirectory(prefix="tfrepro-warm-bench-") as tmp:
            if not args.skip_equivalence:
                ok = equivalence(Path(tmp), pool, [n for n in args.examples.split(",") if n])
            if not args.skip_cost:
                cost(Path(tmp), pool, args.example, args.pairs)
    finally:
        pool.close()
    print(f"load average at end {os.getloadavg()}")
    if not ok:
        print("EQUIVALENCE FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
