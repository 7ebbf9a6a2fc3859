"""How decisive and how honest the slowdown decision is on this machine, now.

Four parts, each printing a table and the load average (1, 5, 15 min):

  record    interleaved real trials (bare, mixed_float16, bare, ...) of the
            tiny CPU MLP in benchmarks/projects/mlp_fp16 (784->256->256->10,
            batch 64), each through the real harness with a long fixed step
            count; their per-step times are saved as JSON traces.
  resample  (traces recorded here at load 4-13 on 2 cores: benchmarks/data/)
            the classifier's sequential decision (slowdown.sequential_slowdown)
            on pairs drawn from recorded traces, each trace cut to the time
            budget the harness would stop at: A/A (a bare trial between two
            bare ones), a uniform 1.4x (that middle trial's steps x1.4) and
            the real mixed_float16 trial between its two bare neighbours.
            Gives the A/A false slowdown rate and the power on real noise.
  real      n fully real comparisons with time-budget timing trials, the
            engine's design (B C B C B ...): A/A and mixed_float16.
  bisect    `tfrepro bisect --json` on benchmarks/projects/slow6 (six
            features, run_eagerly >= 3x slower): status, culprit, trials.

    .venv/bin/python benchmarks/timing_power.py record --n 25 --steps 600 --out traces.json
    .venv/bin/python benchmarks/timing_power.py resample benchmarks/data/*.json.gz --runs 2000
    .venv/bin/python benchmarks/timing_power.py real --n 5
    .venv/bin/python benchmarks/timing_power.py bisect

Never a timed assertion: figures to read, with the load they were taken under.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tfrepro.project import Project  # noqa: E402
from tfrepro.settings import (  # noqa: E402
    TIMING_MIN_STEPS,
    TIMING_MIN_TIME_S,
    TIMING_STEPS_MAX,
    WARMUP_STEPS,
    TrialSettings,
)
from tfrepro.trials.slowdown import QUIET_OTHERS, SequentialPolicy, TimingPair, sequential_slowdown, typical_step  # noqa: E402
from tfrepro.verdicts import Verdict  # noqa: E402


def _budget_class():
    import importlib.util

    path = REPO / "tfrepro" / "inside" / "memory.py"
    spec = importlib.util.spec_from_file_location("_harness_timing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Budget


_BUDGET = _budget_class()
MLP = REPO / "benchmarks" / "projects" / "mlp_fp16"
SLOW6 = REPO / "benchmarks" / "projects" / "slow6"
THRESHOLD = 1.25


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f} on {os.cpu_count()} cores"


# -- record ------------------------------------------------------------------------------


def record(n: int, steps: int, out: Path) -> None:
    from tfrepro.trials.runner import TrialOptions, run_trial

    project = Project.load(MLP)
    state = Path(tempfile.mkdtemp(prefix="tfrepro-traces-"))
    traces = []
    for i in range(n):
        for enabled in ((), ("mixed_precision",)):
            # a timing trial (so the harness measures others_cpu) whose budget is `steps` steps
            s = TrialSettings(steps=steps, timeout_s=600, repeat=i, steps_max=steps, min_time_s=1e9, min_steps=steps)
            t0 = time.time()
            r = run_trial(project, enabled, s, TrialOptions(use_cache=False, state_dir=state))
            traces.append(
                {
                    "enabled": list(enabled),
                    "t": t0,
                    "load": os.getloadavg()[0],
                    "others_cpu": r.extra.get("others_cpu"),
                    "step_times": [round(x, 7) for x in r.step_times],
                    "crashed": r.crashed,
                }
            )
            out.write_text(json.dumps(traces))
            print(
                f"{i:3d} {'+'.join(enabled) or 'bare':16s} {len(r.step_times)} steps, "
                f"typical {1e3 * (typical_step(r.steady_step_times()) or 0):.2f} ms, "
                f"others_cpu {r.extra.get('others_cpu')}, {load()}",
                flush=True,
            )
    shutil.rmtree(state, ignore_errors=True)


# -- resample ----------------------------------------------------------------------------


def budget_cut(step_times, scale: float = 1.0) -> tuple[float, ...]:
    """The steady steps a timing trial would have kept: the harness's own
    budget rule (memory.Budget) fed with the recorded step times (a
    recording shorter than the budget keeps all its steps)."""
    budget = _BUDGET(
        {
            "steps_max": TIMING_STEPS_MAX,
            "min_time_s": TIMING_MIN_TIME_S,
            "min_steps": TIMING_MIN_STEPS,
            "warmup": WARMUP_STEPS,
        }
    )
    for dt in step_times:
        if budget.step(dt * scale):
            break
    return tuple(budget.steady)


def triples(traces: list[dict]) -> dict[str, list[TimingPair]]:
    """Pairs as the engine builds them, in the recorded time order: a bare
    trial's neighbours are the bare trials before and after it."""
    ok = [t for t in traces if not t["crashed"] and len(t["step_times"]) > WARMUP_STEPS + 10]
    bare = [i for i, t in enumerate(ok) if not t["enabled"]]
    out: dict[str, list[TimingPair]] = {"A/A": [], "1.4x": [], "mixed_float16": []}

    def quiet(*idx):  # as the engine: unknown contention counts as a loaded machine
        return all(
            (ok[j].get("others_cpu") if ok[j].get("others_cpu") is not None else 1.0) <= QUIET_OTHERS for j in idx
        )

    def others(*idx):  # the measured load, as the engine hands it to the decision
        return tuple(ok[j].get("others_cpu") for j in idx)

    for a, b, c in zip(bare, bare[1:], bare[2:]):
        before, mid, after = (ok[j]["step_times"] for j in (a, b, c))
        q, o = quiet(a, b, c), others(a, b, c)
        out["A/A"].append(TimingPair(budget_cut(before), budget_cut(mid), budget_cut(after), quiet=q, others=o))
        out["1.4x"].append(TimingPair(budget_cut(before), budget_cut(mid, 1.4), budget_cut(after), quiet=q, others=o))
    for a, b in zip(bare, bare[1:]):
        for m in range(a + 1, b):
            if ok[m]["enabled"] == ["mixed_precision"]:
                cut = (budget_cut(ok[j]["step_times"]) for j in (a, m, b))
                out["mixed_float16"].append(TimingPair(*cut, quiet=quiet(a, m, b), others=others(a, m, b)))
    return out


def simulate(pairs: list[TimingPair], runs: int, seed: int, max_pairs: int = 16) -> dict[str, float]:
    rng = random.Random(seed)
    slow = fast = conclusive = 0
    used = []
    for _ in range(runs):
        out = sequential_slowdown(
            lambda i: rng.choice(pairs), THRESHOLD, SequentialPolicy(min_samples=3, max_samples=max_pairs)
        )
        slow += out.verdict == Verdict.SLOWDOWN
        fast += out.fast
        conclusive += out.conclusive
        used.append(len(out.pairs))
    return {
        "slowdown": slow / runs,
        "fast": fast / runs,
        "conclusive": conclusive / runs,
        "mean pairs": statistics.mean(used),
    }


def resample(paths: list[Path], runs: int) -> None:
    traces = [
        t for p in paths for t in json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())
    ]
    loads = [t["load"] for t in traces]
    groups = triples(traces)
    print(
        f"{len(traces)} recorded trials, load while recording {min(loads):.1f}-{max(loads):.1f} "
        f"(median {statistics.median(loads):.1f}); now {load()}"
    )
    print(
        f"{'case':14s} {'pairs':>5s} {'quiet':>5s} {'ratio/pair (median, range)':>28s} {'slowdown':>9s} {'fast':>6s} "
        f"{'conclusive':>10s} {'mean pairs':>10s}"
    )
    for name, pairs in groups.items():
        if not pairs:
            continue
        ratios = sorted(p.candidate_step / p.baseline_step for p in pairs)
        r = simulate(pairs, runs, seed=len(name))
        print(
            f"{name:14s} {len(pairs):5d} {sum(p.quiet for p in pairs):5d} {statistics.median(ratios):10.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
            f"{'':6s} {r['slowdown']:9.3f} {r['fast']:6.3f} {r['conclusive']:10.3f} {r['mean pairs']:10.2f}"
        )
    # the statistics per trial: how much contention moves each
    for name in ("bare", "mixed_precision"):
        sel = [
            budget_cut(t["step_times"])
            for t in traces
            if (t["enabled"] == [] if name == "bare" else t["enabled"] == [name]) and not t["crashed"]
        ]
        if len(sel) < 2:
            continue
        rows = {
            "typical (window)": [typical_step(s) for s in sel],
            "median": [statistics.median(s) for s in sel],
            "p10": [sorted(s)[len(s) // 10] for s in sel],
        }
        text = ", ".join(
            f"{k} {1e3 * statistics.median(v):.2f} ms (log-sd "
            f"{statistics.stdev([__import__('math').log(x) for x in v]):.2f})"
            for k, v in rows.items()
        )
        print(f"  per trial, {name}: {text}")


# -- real comparisons ------------------------------------------------------------------


def real(n: int) -> None:
    """The engine's own timing code (trials/timing.TimingPool: one shared
    baseline pool, B C B C B, contention from the harness) on real trials."""
    from tfrepro.trials.runner import TrialOptions, run_trial
    from tfrepro.trials.timing import TimingPool

    project = Project.load(MLP)
    state = Path(tempfile.mkdtemp(prefix="tfrepro-timing-"))
    base = TrialSettings(
        steps=50, timeout_s=600, min_time_s=TIMING_MIN_TIME_S, min_steps=TIMING_MIN_STEPS, steps_max=TIMING_STEPS_MAX
    )
    counter = iter(range(10**6))
    others: list[float] = []

    def trial(config, repeat, role):
        # config names a comparison ("aa3", "mixed_precision3"): its own evidence
        enabled = ("mixed_precision",) if any(c.startswith("mixed") for c in config) else ()
        r = run_trial(
            project,
            enabled,
            TrialSettings(**{**base.__dict__, "repeat": next(counter)}),
            TrialOptions(use_cache=False, state_dir=state),
        )
        if r.extra.get("others_cpu") is not None:
            others.append(r.extra["others_cpu"])
        return r

    pool = TimingPool(
        trial, lambda c, t: Verdict.CRASH if t.crashed or t.timed_out else Verdict.OK, THRESHOLD, steps=base.steps
    )
    print(f"start: {load()}")
    print(f"{'case':16s} {'run':>3s} {'verdict':>9s} {'ratio':>6s} {'pairs':>5s} {'fast':>5s} {'trials':>6s}  load")
    totals: dict[str, list] = {}
    for i in range(n):
        for name, key in (("A/A", f"aa{i}"), ("mixed_float16", f"mixed_precision{i}")):
            before = next(counter)
            out = pool.timed(frozenset({key}), SequentialPolicy(min_samples=3, max_samples=16))
            trials = next(counter) - before - 1
            totals.setdefault(name, []).append(out)
            print(
                f"{name:16s} {i:3d} {out.verdict.value:>9s} {out.ratio or 0:6.2f} {len(out.pairs):5d} "
                f"{str(out.fast):>5s} {trials:6d}  {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for name, outs in totals.items():
        k = sum(o.verdict == Verdict.SLOWDOWN for o in outs)
        print(
            f"{name}: slowdown in {k}/{len(outs)}, pairs per comparison "
            f"{statistics.mean(len(o.pairs) for o in outs):.1f}"
        )
    if others:
        print(
            f"others_cpu per trial: median {statistics.median(others):.2f}, "
            f"{sum(o <= QUIET_OTHERS for o in others)}/{len(others)} quiet"
        )
    print(f"end: {load()}")
    shutil.rmtree(state, ignore_errors=True)


# -- bisect ------------------------------------------------------------------------------


def bisect_count(project: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="tfrepro-bisect-")) / project.name
    shutil.copytree(project, work)
    print(f"start: {load()}")
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "tfrepro", "bisect", str(work), "--json"], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        raise
    t = doc.get("timing") or {}
    roles: dict[str, int] = {}
    for row in doc.get("trials_table", []):
        roles[row["role"]] = roles.get(row["role"], 0) + 1
    print(
        f"status {doc['status']}, symptom {doc['symptom']}, culprits {doc['culprits']}, "
        f"trials {doc['trials']} ({', '.join(f'{k} {v}' for k, v in sorted(roles.items()))}), "
        f"wall {wall:.0f} s, exit {proc.returncode}"
    )
    seq = [
        f"{'+'.join(r['enabled']) or 'base'}:{r['verdict']}"
        for r in doc.get("trials_table", [])
        if r["role"] == "timing"
    ]
    print("candidate timing trials, in order:", " ".join(seq))
    if t:
        print(
            f"culprit timing: ratio {t.get('ratio'):.2f}, pairs {len(t.get('pairs', []))}, fast {t.get('fast')}, "
            f"p {t.get('p_value')}"
        )
    print(f"end: {load()}")
    shutil.rmtree(work.parent, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--n", type=int, default=25)
    r.add_argument("--steps", type=int, default=600)
    r.add_argument("--out", type=Path, default=Path("timing_traces.json"))
    s = sub.add_parser("resample")
    s.add_argument("traces", type=Path, nargs="+")
    s.add_argument("--runs", type=int, default=2000)
    q = sub.add_parser("real")
    q.add_argument("--n", type=int, default=5)
    b = sub.add_parser("bisect")
    b.add_argument("project", type=Path, nargs="?", default=SLOW6)
    a = ap.parse_args()
    if a.cmd == "record":
        record(a.n, a.steps, a.out)
    elif a.cmd == "resample":
        resample(a.traces, a.runs)
    elif a.cmd == "real":
        real(a.n)
    else:
        bisect_count(a.project)


if __name__ == "__main__":
    main()
