"""How often a flaky symptom gets a culprit named: the feature engine on fake
trials (the engine tests' `FakeRunner`: no TensorFlow, milliseconds a bisect),
over many seeds, with each rate's exact 95 % interval.

The promise (README, DESIGN): a symptom that does not repeat is `flaky`, not
pinned on a feature. A P = 1/2 NaN is the hard case: with `repeats = 1` a
search sees each subset once, so a missed NaN can end it on a set holding a
bystander, and any finite replay can be fooled (three fresh runs that all
show a P = 1/2 NaN: 1 in 8). What is counted, per case:

- `flaky` / `none` / `found`, and among `found` the answers that name a
  bystander (a feature besides the one that really causes it);
- cases: `fixed_step` (the NaN, when it comes, comes at the same step: the
  fresh runs look deterministic, the worst case for the one-run replay),
  `varying_step` (at one of 5 steps), `everywhere` (every run, the baseline
  included, P = 1/2).

    python benchmarks/flaky_fakes.py --seeds 1000 [--jobs 2] [--json-out F]

Six features (tests/test_engine.FEATS), `repeats = 1`, the default strategy.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import test_engine as fakes  # noqa: E402
from rates import rate_text  # noqa: E402

from tfrepro.bisect.engine import BisectOptions, bisect  # noqa: E402

CULPRIT = "prefetch"


def _nan_at(step: int) -> dict:
    return {"losses": fakes.losses()[:step] + (float("nan"),), "first_nonfinite_step": step + 1}


def behaviour(case: str, seed: int):
    def behave(cfg, r):
        rng = random.Random(zlib.crc32(f"{case}{seed}{sorted(cfg)}{r}".encode()))
        if case == "everywhere":
            return fakes.NAN if rng.random() < 0.5 else {}
        if CULPRIT not in cfg or rng.random() >= 0.5:
            return {}
        return fakes.NAN if case == "fixed_step" else _nan_at(rng.randrange(1, 6))

    return behave


def run(case: str, seeds: int, root: Path, jobs: int = 1) -> Counter:
    out: Counter = Counter()
    for seed in range(seeds):
        doc = bisect(
            fakes.make_project(root / f"{case}-{seed}", fakes.FEATS),
            BisectOptions(jobs=jobs),
            runner=fakes.FakeRunner(behaviour(case, seed)),
        )
        out["trials"] += doc.to_dict()["trials"]
        out[doc.status.value] += 1
        if doc.status.value == "found" and set(doc.culprits) - {CULPRIT}:
            out["found_with_bystander"] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--jobs", type=int, default=1, help="trials run at once (BisectOptions.jobs; default 1)")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tfrepro-flaky-fakes-") as tmp:
        for case in ("fixed_step", "varying_step", "everywhere"):
            t0 = time.monotonic()
            got = run(case, args.seeds, Path(tmp), args.jobs)
            results[case] = dict(got)
            n = args.seeds
            print(
                f"{case:<13} found {rate_text(got['found'], n)}; with a bystander "
                f"{rate_text(got['found_with_bystander'], n)}; flaky {got['flaky']}, none {got['none']}, "
                f"baseline-fails {got['baseline-fails']}; {got['trials']} trials ({time.monotonic() - t0:.0f} s)"
            )
    if args.json_out:
        args.json_out.write_text(json.dumps({"seeds": args.seeds, "jobs": args.jobs, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
