"""Disk use of `.tfrepro/` after a bisect (issue 24's done-when): a project
with a 31 MB data file, a bisect of a few dozen trials, and the state dir's
size against the project's. No TensorFlow: the script prints its losses.

    python benchmarks/disk_use.py [--mb 31] [--features 8]

Prints one JSON line: project_mb, state_mb, ratio, trials.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        (root / "repro.py").write_text(script(args.features))
        (root / "data.bin").write_bytes(os.urandom(args.mb << 20))
        project = tree_size(root)
        r = subprocess.run(
            [sys.executable, "-m", "tfrepro", "bisect", str(root), "--steps", "8", "--json", "--strategy", "ddmin"],
            capture_output=True,
            text=True,
        )
        doc = json.loads(r.stdout)
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
                    "trials": trials,
                }
            )
        )


if __name__ == "__main__":
    main()
