"""No false memory: N rounds on a healthy example, each its own baseline pair
and failing configuration (fresh trials, no cache), judged by the memory
classifier exactly as `bisect` judges them. Prints one line per round and the
count of rounds that show `memory` (the answer should be 0 of N).

    .venv/bin/python benchmarks/memory_aa.py                 # healthy, 20 rounds
    .venv/bin/python benchmarks/memory_aa.py --rounds 5 --example slow_callback --save out.json
    .venv/bin/python benchmarks/memory_aa.py --script benchmarks/wild/text_classification_healthy/train.py --rounds 10

`--script` takes a plain training script instead (a wild-style one, models of
real size): it is copied alone into a folder and loaded zero-edit, as
`tfrepro bisect train.py` would; its failing configuration is every detected
feature on, i.e. the script as written.

Also runs the leaking example once per `--leak-every` rounds as a positive
control (`memory_callback`: must show `memory` every time).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tfrepro.project import Project  # noqa: E402
from tfrepro.trials.classify import decide_memory, symptoms  # noqa: E402
from tfrepro.trials.runner import TrialOptions, run_trial  # noqa: E402
from tfrepro.verdicts import Verdict  # noqa: E402


def one_round(project: Project, i: int, state: Path) -> dict:
    settings = project.manifest.trial
    from dataclasses import replace

    runs = [
        run_trial(
            project, (), replace(settings, repeat=1000 + 2 * i + j), TrialOptions(use_cache=False, state_dir=state)
        )
        for j in range(2)
    ]
    full = run_trial(
        project,
        project.feature_names,
        replace(settings, repeat=1000 + i),
        TrialOptions(use_cache=False, state_dir=state),
    )
    d = decide_memory(full, runs, project.manifest.symptoms.memory)
    shown = symptoms(full, reference=None, settings=project.manifest.symptoms, baselines=runs)
    return {
        "round": i,
        "memory": Verdict.MEMORY in shown,
        "close": d.close,
        "reason": d.reason,
        "peak_ratio": d.peak_ratio,
        "growth_per_step": d.growth,
        "growth_limit": d.growth_limit,
        "growth_z": d.growth_z,
        "base_growth": [r.growth_per_step for r in runs],
        "peaks_mb": [round((r.peak_rss_bytes or 0) / 1e6, 1) for r in [*runs, full]],
        "wall_s": round(sum(r.wall_s for r in [*runs, full]), 2),
    }


def _as_bisected(project: Project, state: Path) -> Project:
    """The project as `bisect` hunts it: a feature whose OFF part breaks the
    baseline is kept ON (the engine's preflight), so the baselines compared
    are the ones a bisect compares (timeseries_fcn_healthy loads the
    checkpoint its ModelCheckpoint writes: all OFF, it crashes)."""
    from tfrepro.bisect.ends import preflight

    def run(p: Project):
        return run_trial(p, (), p.manifest.trial, TrialOptions(use_cache=False, state_dir=state))

    got = preflight(project, run)
    for d in got.dropped:
        print(f"kept ON (as bisect does): {d['name']}: {d['reason']}", flush=True)
    return got.project


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="healthy")
    ap.add_argument("--script", type=Path, help="a plain script, loaded zero-edit (instead of --example)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--leak-every", type=int, default=0, help="a memory_callback round every K rounds (0: none)")
    ap.add_argument("--save", type=Path)
    args = ap.parse_args()
    rows, controls = [], []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfrepro-memaa-") as tmp:
        for name in ([] if args.script else [args.example]) + (["memory_callback"] if args.leak_every else []):
            shutil.copytree(REPO / "tfrepro" / "examples" / name, Path(tmp) / name)
        if args.script:
            home = Path(tmp) / "script"
            home.mkdir()
            shutil.copy2(args.script, home / "train.py")
            healthy = Project.load(home / "train.py")
            print(f"{args.script}: zero-edit, features {', '.join(healthy.feature_names)}", flush=True)
            healthy = _as_bisected(healthy, Path(tmp) / "state")
        else:
            healthy = Project.load(Path(tmp) / args.example)
        for i in range(args.rounds):
            row = one_round(healthy, i, Path(tmp) / "state")
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.leak_every and (i + 1) % args.leak_every == 0:
                c = one_round(Project.load(Path(tmp) / "memory_callback"), i, Path(tmp) / "state")
                controls.append(c)
                print("control", json.dumps(c), flush=True)
    false = sum(r["memory"] for r in rows)
    summary = {
        "example": str(args.script) if args.script else args.example,
        "rounds": len(rows),
        "memory_shown": false,
        "measured": sum(r["peak_ratio"] is not None for r in rows),  # rounds that compared a memory figure
        "close_calls": sum(r["close"] for r in rows),
        "max_peak_ratio": max((r["peak_ratio"] or 0) for r in rows),
        "max_growth_per_step": max((r["growth_per_step"] or 0) for r in rows),
        "growth_limit_per_step": min((r["growth_limit"] or 0) for r in rows),
        "controls": len(controls),
        "controls_shown": sum(c["memory"] for c in controls),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(summary))
    if args.save:
        args.save.write_text(json.dumps({"summary": summary, "rows": rows, "controls": controls}, indent=1))
    return 0 if false == 0 and summary["controls_shown"] == len(controls) else 1


if __name__ == "__main__":
    raise SystemExit(main())
