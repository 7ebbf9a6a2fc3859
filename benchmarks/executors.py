"""Wall time of bisect-suite examples per executor: local --jobs 1, local --jobs 2, ray.

Each example of `tfrepro/examples/` (default: a few that need several rounds
of independent trials) is bisected by the real CLI (`bisect_suite.run_example`:
a temp copy, a subprocess, `--json`, no cache shared between runs) once per
executor. The three runs of one example follow each other, in an order that
rotates from one example to the next, so that drift in the machine's load
hits every executor alike. Ray runs against one local Ray instance started
here beforehand (`ray.init`, its start-up time reported on its own line), the
way a team points tfrepro at a running cluster with `--address`.

    .venv/bin/python benchmarks/executors.py                          # demo, interaction
    .venv/bin/python benchmarks/executors.py --only demo --save /tmp/executors.json

Prints per-example wall times, the totals and their ratios to local --jobs 1,
and whether every executor gave the expected answer. Ratios from one run on
the machine named; never a timed assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bisect_suite import EXAMPLES, answer_text, machine, run_example  # noqa: E402

DEFAULT = "demo,interaction"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=DEFAULT, help=f"comma-separated example names (default: {DEFAULT})")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the local Ray instance")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per bisect")
    ap.add_argument("--save", type=Path, help="write every run (wall time, answer) here as JSON")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    for n in names:
        if not (EXAMPLES / n / "expected.json").is_file():
            ap.error(f"unknown example {n!r}")

    from tfrepro.trials.executors import keep_ray_on_loopback

    keep_ray_on_loopback()
    import ray

    print(f"# executors benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {machine()}", flush=True)
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    ray_start = time.perf_counter() - t0
    print(
        f"# local Ray instance ({args.cpus} CPUs) started in {ray_start:.1f} s at {address} (not counted below)",
        flush=True,
    )

    configs = {
        "local --jobs 1": ["--jobs", "1"],
        "local --jobs 2": ["--jobs", "2"],
        "ray": ["--executor", "ray", "--address", address],
    }
    order = list(configs)
    runs: list[dict] = []
    try:
        for i, name in enumerate(names):
            for label in order[i % len(order) :] + order[: i % len(order)]:
                o = run_example(name, timeout_s=args.timeout, keep=None, extra_args=configs[label])
                trials = o.doc.get("trials") if o.doc else None
                runs.append(
                    {
                        "example": name,
                        "executor": label,
                        "wall_s": round(o.wall_s, 1),
                        "trials": trials,
                        "answer": answer_text(o.doc),
                        "ok": o.ok,
                        "problems": o.problems,
                    }
                )
                print(
                    f"  {name:<22} {label:<15} {o.wall_s:6.1f} s  {trials} trials  "
                    f"{answer_text(o.doc)} -> {'ok' if o.ok else 'WRONG'}",
                    flush=True,
                )
    finally:
        ray.shutdown()

    print()
    print("| executor | wall s (total) | ratio to local --jobs 1 | trials | right answers |")
    print("|---|---|---|---|---|")
    base = sum(r["wall_s"] for r in runs if r["executor"] == "local --jobs 1")
    for label in configs:
        mine = [r for r in runs if r["executor"] == label]
        wall = sum(r["wall_s"] for r in mine)
        print(
            f"| {label} | {wall:.0f} | {wall / base:.2f} | {sum(r['trials'] or 0 for r in mine)} | "
            f"{sum(r['ok'] for r in mine)}/{len(mine)} |"
        )
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.save:
        args.save.write_text(
            json.dumps({"machine": machine(), "ray_start_s": round(ray_start, 1), "runs": runs}, indent=2) + "\n",
            encoding="utf-8",
        )
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
