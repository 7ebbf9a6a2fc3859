"""Issue 27's done-when, end to end, as a user runs it: for each data project
under benchmarks/projects (a CSV, `.npy` arrays, TFRecords, and a custom
layer whose NaN needs only the shapes), in a fresh git repository:
`tfrepro bisect --json`, then `tfrepro report --json`; the bundle is copied
alone into an empty directory and run there as `python repro.py` (no
arguments, no PYTHONPATH, the project's data files absent). Right: the bisect
found the NaN, the lone repro shows it (its last line says the symptom was
seen, or a loss is nan), and no file of the bundle is byte-identical to one
of the project's data files. `wild/feature_layer_nan` (issue 26: keras-io's
feature-engineering example, a NaN-producing custom feature layer over a
dict of inputs) is run the same way, zero-edit. Then the late step: `late_nan` (NaN first at
step 606) without `--steps` and with `--steps 700`, trials and wall time.

    .venv/bin/python benchmarks/standins.py [--case csv_nan,late_nan] [--json-out FILE]

Prints a table; exit 0 when every case is right.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECTS = HERE / "projects"
DATA_CASES = ["csv_nan", "npy_nan", "tfrecord_nan", "shape_only_nan", "wild/feature_layer_nan"]
PY = sys.executable
sys.path.insert(0, str(HERE))
from _repos import child_env, git  # noqa: E402  (the suites' isolated git and tfrepro-first PYTHONPATH)

ENV = child_env()


def _git_repo(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)
    git(dest, "init", "-q", "-b", "main", env=ENV)
    git(dest, "add", "-A", env=ENV)
    git(dest, "commit", "-q", "-m", "user's project", env=ENV)


def _tfrepro(cwd: Path, *args: str, timeout: int = 1800) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    p = subprocess.run([PY, "-m", "tfrepro", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = {"error": (p.stdout + p.stderr)[-400:]}
    return p.returncode, doc, time.monotonic() - t0


def _hashes(root: Path) -> set[str]:
    return {hashlib.sha256(f.read_bytes()).hexdigest() for f in root.rglob("*") if f.is_file()}


def data_case(name: str, tmp: Path) -> dict:
    """A project under benchmarks/projects, or `wild/<case>` (a plain script, bisected zero-edit)."""
    src = HERE / name if name.startswith("wild/") else PROJECTS / name
    repo = tmp / name.replace("/", "-")
    _git_repo(src, repo)
    target = "." if (repo / "tfrepro.toml").is_file() else "train.py"
    rc, doc, wall = _tfrepro(repo, "bisect", "--json", target)
    row = {
        "case": name,
        "bisect": f"{doc.get('status')}: {doc.get('symptom')} <- {','.join(doc.get('culprits') or [])}",
        "trials": doc.get("trials"),
        "bisect_s": round(wall, 1),
    }
    rc, rep, wall = _tfrepro(repo, "report", "--json")
    row["report_rc"], row["report_s"] = rc, round(wall, 1)
    bundle = Path(rep.get("bundle") or repo / "no-bundle")
    alone = tmp / f"{repo.name}-alone"
    if (bundle / "repro.py").is_file():
        shutil.copytree(bundle, alone)
        run = subprocess.run(
            [PY, "repro.py"],
            cwd=alone,
            capture_output=True,
            text=True,
            timeout=600,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
        out = run.stdout + run.stderr
        row["repro_rc"] = run.returncode
        row["repro_shows_nan"] = "(tfrepro) symptom seen: NaN/Inf" in out  # the bundle's own last line
        data_files = [f for f in (repo / "data").rglob("*") if f.is_file()] if (repo / "data").is_dir() else []
        whole = _hashes(alone) & {hashlib.sha256(f.read_bytes()).hexdigest() for f in data_files}
        row["data_whole"] = len(whole)
        row["shipped"] = sorted(p.name for p in alone.iterdir() if p.suffix in (".npz", ".npy", ".csv", ".tfrecord"))
    else:
        row.update(repro_rc=None, repro_shows_nan=False, data_whole=None, shipped=[], note=str(rep)[:300])
    row["right"] = (
        (doc.get("status"), doc.get("symptom")) == ("found", "nan")
        and bool(row["repro_shows_nan"])
        and row["data_whole"] == 0
    )
    return row


def late_case(tmp: Path) -> list[dict]:
    rows = []
    for extra in ([], ["--steps", "700"]):
        repo = tmp / ("late_nan" + "".join(extra).replace("--", "-"))
        _git_repo(PROJECTS / "late_nan", repo)
        rc, doc, wall = _tfrepro(repo, "bisect", "--json", ".", *extra)
        rows.append(
            {
                "case": "late_nan " + (" ".join(extra) or "(no --steps)"),
                "bisect": f"{doc.get('status')}: {doc.get('symptom')} <- {','.join(doc.get('culprits') or [])}",
                "trials": doc.get("trials"),
                "bisect_s": round(wall, 1),
                "right": (doc.get("status"), doc.get("symptom"), doc.get("culprits"))
                == ("found", "nan", ["log_income"]),
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default=",".join([*DATA_CASES, "late_nan"]))
    ap.add_argument("--json-out")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as t:
        for name in args.case.split(","):
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows += late_case(Path(t)) if name == "late_nan" else [data_case(name, Path(t))]
            print(f"  -> {rows[-1]}", file=sys.stderr, flush=True)
    keys = ["case", "bisect", "trials", "bisect_s", "repro_rc", "repro_shows_nan", "data_whole", "shipped", "right"]
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r.get(k, "")) for k in keys))
    right = sum(bool(r["right"]) for r in rows)
    print(f"\n{right}/{len(rows)} right; load {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "load": [load0, os.getloadavg()[0]]}, indent=1))
    return 0 if right == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
