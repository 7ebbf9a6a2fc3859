"""Disk use of `.tfrepro/` after a bisect (issue 24's done-when): a project
with a 31 MB data file, a bisect of a few dozen trials, and the state dir's
size against the project's. No TensorFlow: the script prints its losses.

    python benchmarks/disk_use.py [--mb 31] [--features 8] [--jobs 2]

Prints one JSON line: project_mb, state_mb, ratio, trials, jobs, and the
load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfrepro.trials.state import tree_size


def script(n: int) -> str:
    blocks = "".join(
        f"# tfrepro: feature f{i} -- demo\nF{i} = 1\n# tfrepro: else\n# F{i} = 0\n# tfrepro: end\n" for i in range(n)
    )
    # two features together make the NaN: delta debugging needs more trials than ablation
    return (
        blocks
        + 'open("data.bin", "rb").read(16)\n'
        + "for i in range(1, 9):\n"
        + f"    print(f'step={{i}} loss={{float(\"nan\") if F1 and F{n - 2} and i > 4 else 1.0 / i}}')\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=31)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=1, help="trials run at once (bisect --jobs)")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        (root / "repro.py").write_text(script(args.features))
        (root / "data.bin").write_bytes(os.urandom(args.mb << 20))
        project = tree_size(root)
        cmd = [sys.executable, "-m", "tfrepro", "bisect", str(root), "--steps", "8", "--json", "--strategy", "ddmin"]
        proc = subprocess.Popen([*cmd, "--jobs", str(args.jobs)], stdout=subprocess.PIPE, text=True)
        peak = 0  # the state dir's largest size seen while the bisect runs (sampled)
        while proc.poll() is None:
            with contextlib.suppress(OSError):
                peak = max(peak, tree_size(root / ".tfrepro"))
            time.sleep(0.1)  # a sampling interval, not an ordering
        doc = json.loads(proc.stdout.read())
        state = tree_size(root / ".tfrepro")
        trials = len(list((root / ".tfrepro" / "trials").iterdir()))
        print(
            json.dumps(
                {
                    "status": doc["status"],
                    "culprits": doc.get("culprits"),
                    "project_mb": round(project / 2**20, 1),
                    "state_mb": round(state / 2**20, 2),
                    "ratio": round(state / project, 3),
                    "peak_state_mb": round(peak / 2**20, 2),
                    "trials": trials,
                    "jobs": args.jobs,
                    "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
                }
            )
        )


if __name__ == "__main__":
    main()
