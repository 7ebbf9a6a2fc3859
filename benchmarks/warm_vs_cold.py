"""Warm (forked from a warm server) against cold trials, side by side in one run.

Two parts, every trial through the real runner (`run_variant`):

1. equivalence: every bundled example (`tfrepro/examples/*`, marked projects)
   and every journey script (`benchmarks/journey/<case>/train.py`, unmarked:
   loaded zero-edit, its features detected in memory, from a copy in a scratch
   directory), `--suite` picks which. Per script, its baseline (all features
   OFF) and its failing configuration (all ON), seeded and deterministic as
   the runner makes them, cold then warm, each trial in a fresh variant
   directory: the per-step losses must be bit-identical, the crash line, the
   first non-finite step and the timeout too, and the verdict of
   `classify.primary` the same, warm and cold each judged against the same
   reference (the cold baseline: its losses for mismatch, its memory for
   memory; a slowdown is never decided by `classify`, the median step times
   are printed instead). Exceptions, each with its reason, in `RANDOM_BY_DESIGN`
   ("flaky_nan": the script draws from OS entropy on purpose); for those, and
   for any pair that differs, a second cold run is the control: when two cold
   runs differ as well the row says "random", and only a script listed there
   may pass that way;
2. cost: interleaved cold/warm pairs of one example's baseline. Per trial:
   wall (from asking for the trial to its result), training (sum of the
   harness's step times), fixed cost = wall − training. A/A timing: the ratio
   warm/cold of the median steady step time, per pair, and its median.

3. `--aa N`: A/A timing of the process kind, as a slowdown is decided: the
   example's baseline with the bisect's time budget, cold, warm, cold, ...,
   each warm trial against its two cold neighbours; the median ratio and
   the signed-rank p-values both ways.

The first warm trial also pays the server's start (the TensorFlow import,
once per bisect): it is shown on its own line and left out of the medians.
Figures on a shared machine are noisy: read the ratios of interleaved pairs
and the load average printed with them.

    PYTHONPATH=. .venv/bin/python benchmarks/warm_vs_cold.py [--suite examples|journey|both]
        [--only demo,healthy] [--steps N] [--pairs 5] [--example demo] [--skip-equivalence] [--skip-cost] [--aa 15]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tfrepro.project import Project
from tfrepro.trials import classify, warm
from tfrepro.trials.runner import TrialOptions, run_variant
from tfrepro.trials.values import TrialResult

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "tfrepro" / "examples"
JOURNEY = ROOT / "benchmarks" / "journey"
SUITES = ("examples", "journey", "both")
# Scripts that are not deterministic on purpose, and why. Their warm and cold
# runs may differ; a second cold run differing too is the proof it is the script.
RANDOM_BY_DESIGN = {
    ("examples", "flaky_nan"): "seeds itself from OS entropy on purpose (a NaN in about half of the runs)",
}


@dataclass
class Script:
    suite: str  # "examples" | "journey"
    name: str
    project: Project


def same_losses(a, b) -> bool:
    """Bit for bit; a non-finite loss (stored as None, read back as NaN) equals another."""
    return [x.hex() if x == x else "nan" for x in a] == [x.hex() if x == x else "nan" for x in b]


def end_facts(r: TrialResult) -> tuple:
    """How a trial ended: crashed, its crash line, first non-finite step, timeout."""
    return (r.crashed, r.error, r.first_nonfinite_step, r.timed_out)


def verdict(r: TrialResult, reference: TrialResult, project: Project) -> str:
    """The classifier's verdict of `r` against `reference` (losses and memory)."""
    sym = project.manifest.symptoms
    return classify.primary(classify.symptoms(r, reference=reference, settings=sym, baselines=(reference,))).value


def scripts(suite: str, only: set[str], scratch: Path) -> list[Script]:
    out = []
    if suite in ("examples", "both"):
        for ex in sorted(p for p in EXAMPLES.iterdir() if (p / "tfrepro.toml").exists()):
            if not only or ex.name in only:
                out.append(Script("examples", ex.name, Project.load(ex)))
    if suite in ("journey", "both"):
        for case in sorted(p for p in JOURNEY.iterdir() if (p / "train.py").is_file()):
            if only and case.name not in only:
                continue
            # The user's file alone in a folder of its own (inside this repository
            # its project would be the repository): zero-edit, as `tfrepro bisect train.py`.
            home = scratch / "journey" / case.name
            home.mkdir(parents=True)
            shutil.copy2(case / "train.py", home / "train.py")
            proj = Project.load(home / "train.py")
            assert proj.detected, f"{case.name}: expected a zero-edit (detected) project"
            out.append(Script("journey", case.name, proj))
    if only and (missing := only - {s.name for s in out}):
        raise SystemExit(f"unknown script(s) for --suite {suite}: {', '.join(sorted(missing))}")
    return out


def trial(
    proj: Project,
    enabled: tuple[str, ...],
    tmp: Path,
    tag: str,
    cold: bool,
    pool: warm.WarmPool,
    steps: int | None = None,
):
    settings = replace(proj.manifest.trial, deterministic=True, timeout_s=300)
    if steps:
        settings = replace(settings, steps=steps)
    how = "cold" if cold else "warm"
    variant = tmp / f"variant-{tag}-{how}"
    if variant.exists():  # each trial its own fresh variant (scripts write relative files)
        shutil.rmtree(variant)
    proj.write_variant(enabled, variant)
    start = time.perf_counter()
    result = run_variant(variant, settings, tmp / f"trial-{tag}-{how}", TrialOptions(cold=cold), warm_pool=pool)
    wall = time.perf_counter() - start
    return result, wall


def _ms(r: TrialResult) -> str:
    med = r.median_step_time()
    return f"{med * 1000:.3g}" if med else "-"


def equivalence(tmp: Path, pool: warm.WarmPool, chosen: list[Script], steps: int | None) -> bool:
    print("equivalence: cold vs warm, per script and configuration (seeded, deterministic)")
    print("verdicts: classify() against the cold baseline; slowdown is not classify's: see the step ms")
    head = (
        f"{'suite':8} {'script':30} {'config':8} {'steps':>5} {'losses':>9} {'end':>6} "
        f"{'verdict cold/warm':>19} {'step ms cold/warm':>17}  process"
    )
    print(head)
    ok = True
    counts = {"identical": 0, "random": 0, "DIFFER": 0}
    for s in chosen:
        names = tuple(sorted(s.project.feature_names))
        base_cold = None
        for config, enabled in [("baseline", ()), ("all-on", names)]:
            tag = f"{s.suite}-{s.name}-{config}"
            cold, _ = trial(s.project, enabled, tmp, tag, True, pool, steps)
            hot, _ = trial(s.project, enabled, tmp, tag, False, pool, steps)
            if base_cold is None:
                base_cold = cold  # the one reference, for warm and cold alike
            same = same_losses(cold.losses, hot.losses)
            same_end = end_facts(cold) == end_facts(hot)
            v_cold, v_warm = verdict(cold, base_cold, s.project), verdict(hot, base_cold, s.project)
            label = "identical" if same else "DIFFER"
            random_ok = False
            if not (same and same_end and v_cold == v_warm):  # the control: a second cold run
                again, _ = trial(s.project, enabled, tmp, tag + "-again", True, pool, steps)
                if not same_losses(cold.losses, again.losses) or end_facts(cold) != end_facts(again):
                    label = "random"
                    random_ok = (s.suite, s.name) in RANDOM_BY_DESIGN
                    if not random_ok:
                        label = "random?"  # not declared: a failure, whatever the cause
            good = (same and same_end and v_cold == v_warm) or random_ok
            good &= cold.extra.get("process") == "cold" and hot.extra.get("process") == "warm"
            ok &= good
            counts["identical" if same and same_end and v_cold == v_warm else "random" if random_ok else "DIFFER"] += 1
            print(
                f"{s.suite:8} {s.name:30} {config:8} {len(cold.losses):5d} {label:>9} "
                f"{'same' if same_end else 'DIFFER':>6} {v_cold + '/' + v_warm:>19} "
                f"{_ms(cold) + '/' + _ms(hot):>17}  {cold.extra.get('process')}/{hot.extra.get('process')}"
            )
            if not same_end:
                print(f"    cold ended {end_facts(cold)}\n    warm ended {end_facts(hot)}")
    total = sum(counts.values())
    print(
        f"{counts['identical']}/{total} identical warm and cold (losses, end, verdict), "
        f"{counts['random']} random by design, {counts['DIFFER']} differing"
    )
    for (suite, name), why in RANDOM_BY_DESIGN.items():
        if any(s.suite == suite and s.name == name for s in chosen):
            print(f"  {name}: {why}")
    return ok


def cost(tmp: Path, pool: warm.WarmPool, example: str, pairs: int, modes: list[str] | None = None) -> None:
    """The fixed cost per trial, cold and warm, in interleaved pairs; with
    `modes` (confinement mechanisms: overlay, landlock, none), each pair runs
    every mode, side by side in one run (`TFREPRO_CONFINE` per trial)."""
    from tfrepro.trials import confine

    proj = Project.load(EXAMPLES / example)
    rows = []
    kinds = modes or [""]
    if "none" in kinds:
        confine.UNCONFINED = True
    for i in range(pairs + 1):  # pair 0: warm-up (the warm side may start its server)
        order = kinds if i % 2 == 0 else kinds[::-1]
        for mode in order:
            if mode:
                os.environ[confine.ENV] = mode
            for cold in (True, False) if i % 2 == 0 else (False, True):
                result, wall = trial(proj, (), tmp, f"cost{i}{mode}", cold, pool)
                train = sum(result.step_times)
                how = ("cold" if cold else "warm") + (f"/{mode}" if mode else "")
                rows.append((i, how, wall, train, wall - train, result.median_step_time()))
    os.environ.pop(confine.ENV, None) if modes else None
    print(
        f"\ncost: {example} baseline, {pairs} interleaved pairs (pair 0: warm-up of both sides, the warm "
        "server's start if not started yet; not counted)"
    )
    print(f"{'pair':>4} {'process':14} {'wall s':>8} {'train s':>8} {'fixed s':>8} {'median step ms':>15}")
    for i, how, wall, train, fixed, med in rows:
        print(f"{i:4d} {how:14} {wall:8.3f} {train:8.3f} {fixed:8.3f} {med * 1000 if med else float('nan'):15.3f}")
    counted = [r for r in rows if r[0] > 0]
    for how in dict.fromkeys(r[1] for r in counted):
        mine = [r for r in counted if r[1] == how]
        print(
            f"median {how}: wall {statistics.median(r[2] for r in mine):.3f} s, "
            f"training {statistics.median(r[3] for r in mine):.3f} s, "
            f"fixed cost {statistics.median(r[4] for r in mine):.3f} s"
        )
    for mode in kinds:
        tag = f"/{mode}" if mode else ""
        ratios = []
        for i in range(1, pairs + 1):
            c = next(r for r in counted if r[0] == i and r[1] == "cold" + tag)
            w = next(r for r in counted if r[0] == i and r[1] == "warm" + tag)
            if c[5] and w[5]:
                ratios.append(w[5] / c[5])
        if ratios:
            print(
                f"A/A step time warm/cold{tag}, per pair: {', '.join(f'{r:.3f}' for r in ratios)}; "
                f"median {statistics.median(ratios):.3f}"
            )


def aa_timing(tmp: Path, pool: warm.WarmPool, example: str, n: int) -> None:
    """A/A of the process kind: the same configuration timed cold, warm,
    cold, warm, ... with the bisect's time budget, each warm trial paired
    with its two cold neighbours (TimingPair, as a slowdown is decided):
    the median warm/cold ratio and the exact one-sided signed-rank p-values
    of "warm is slower" and "warm is faster"."""
    from tfrepro.trials.slowdown import signed_rank_greater, timing_pair

    proj = Project.load(EXAMPLES / example)
    budget = replace(proj.manifest.trial, deterministic=True, timeout_s=300).timed()
    trial(proj, (), tmp, "aa-warmup", False, pool)  # the warm server's start, not counted
    seq = []
    for i in range(2 * n + 1):
        cold = i % 2 == 0
        variant = tmp / f"variant-aa{i}"
        proj.write_variant((), variant)
        seq.append(run_variant(variant, budget, tmp / f"trial-aa{i}", TrialOptions(cold=cold), warm_pool=pool))
        shutil.rmtree(variant, ignore_errors=True)
    pairs = [timing_pair(seq[i - 1], seq[i], seq[i + 1]) for i in range(1, 2 * n, 2)]
    logs = [p.log_ratio for p in pairs if p is not None]
    ratios = sorted(math.exp(x) for x in logs)
    print(f"\nA/A timing, {example} baseline, {len(logs)} warm trials each between two cold ones, time budget")
    print(f"  warm/cold per pair: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(
        f"  median {statistics.median(ratios):.3f}; p(warm slower) {signed_rank_greater(logs):.3f}, "
        f"p(warm faster) {signed_rank_greater([-x for x in logs]):.3f}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=SUITES, default="both", help="which scripts the equivalence part runs")
    ap.add_argument("--only", default="", help="comma-separated script names (examples or journey cases)")
    ap.add_argument("--examples", default="", help=argparse.SUPPRESS)  # the old name of --only
    ap.add_argument("--steps", type=int, default=0, help="steps per equivalence trial (default: the project's)")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--example", default="demo", help="the example of the cost part")
    ap.add_argument("--skip-equivalence", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--aa", type=int, default=0, help="A/A timing: this many warm trials between cold ones")
    ap.add_argument(
        "--confine-modes", default="", help="cost part: comma-separated mechanisms side by side (overlay,none)"
    )
    args = ap.parse_args()
    only = {n for n in f"{args.only},{args.examples}".split(",") if n}
    start = time.monotonic()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average at start {os.getloadavg()}")
    pool = warm.WarmPool()
    ok = True
    try:
        with tempfile.TemporaryDirectory(prefix="tfrepro-warm-bench-") as tmp:
            if not args.skip_equivalence:
                chosen = scripts(args.suite, only, Path(tmp))
                ok = equivalence(Path(tmp), pool, chosen, args.steps or None)
            if not args.skip_cost:
                cost(Path(tmp), pool, args.example, args.pairs, [m for m in args.confine_modes.split(",") if m])
            if args.aa:
                aa_timing(Path(tmp), pool, args.example, args.aa)
    finally:
        pool.close()
    print(f"load average at end {os.getloadavg()}, wall {time.monotonic() - start:.0f} s")
    if not ok:
        print("EQUIVALENCE FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
