"""Does a slowdown bundle's repro.py run slower than its reference.py, by how much?

The speed check tests/test_report_e2e.py used to assert (Keras's printed step
time, repro > 1.25 x reference), as a figure to read instead: the slowdown
project of that test (a per-batch callback that sleeps 40 ms) is bisected and
reported with the real CLI, then the bundle's repro.py and reference.py run
`--runs` times each, interleaved, in a clean directory; Keras's mean step time
of the 2nd epoch (no tracing in it) is printed per run, with the load.

    .venv/bin/python benchmarks/report_slowdown.py [--runs 3]

Never a timed assertion: figures to read, with the load they were taken under.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from test_report_e2e import NO_TFREPRO, PROJECTS  # noqa: E402


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f} on {os.cpu_count()} cores"


def step_time(output: str) -> float | None:
    found = re.findall(r"(\d+(?:\.\d+)?)(s|ms|us)/step", output)
    if not found:
        return None
    value, unit = found[-1]
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def tfrepro(*args: str, cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "tfrepro", *args, "--json"], cwd=cwd, env=env, capture_output=True, text=True
    )
    try:
        return json.loads(proc.stdout)
    except ValueError:
        sys.exit(f"tfrepro {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def run_clean(bundle: Path, script: str, clean: Path) -> float | None:
    shutil.copy(bundle / script, clean / script)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    proc = subprocess.run(
        [sys.executable, "-c", NO_TFREPRO, script], cwd=clean, env=env, capture_output=True, text=True, timeout=600
    )
    return step_time(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfrepro-report-slowdown-"))
    try:
        src, manifest = PROJECTS["slowdown"]
        proj = work / "proj"
        proj.mkdir()
        (proj / "repro.py").write_text(src)
        (proj / "tfrepro.toml").write_text(manifest)
        print(f"start: {load()}", flush=True)
        doc = tfrepro("bisect", str(proj), cwd=work)
        print(f"bisect: {doc['status']} {doc['symptom']} {doc['culprits']}, {doc['trials']} trials", flush=True)
        bundle = Path(tfrepro("report", str(work / doc["run_dir"]), cwd=work)["bundle"])
        clean = work / "clean"
        clean.mkdir()
        got: dict[str, list[float]] = {"repro.py": [], "reference.py": []}
        for i in range(a.runs):
            for script in got:
                t = run_clean(bundle, script, clean)
                if t is not None:
                    got[script].append(t)
                print(f"{i:2d} {script:13s} {1e3 * (t or 0):8.1f} ms/step  {load()}", flush=True)
        slow, fast = (statistics.median(v) if v else None for v in got.values())
        if slow and fast:
            print(f"repro / reference: {slow / fast:.2f} (medians over {a.runs} runs each)")
        print(f"end: {load()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
