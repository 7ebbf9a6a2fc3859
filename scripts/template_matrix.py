"""Run every template x every catalog feature, each block turned ON, and ALL ON.

For each row it generates a project with `tfrepro new` (the feature selected,
so its block exists, written OFF), renders the variant with that feature ON
(`Project.write_variant`, what a tfrepro trial runs) and runs it with plain
`python repro.py` for a few steps. A row passes when the script exits 0 and
every epoch loss it prints is finite. Extra rows cover the other task kinds,
sequence layers and data sources (with `make_sample_data.py` writing the data).

    .venv/bin/python scripts/template_matrix.py            # the whole matrix
    .venv/bin/python scripts/template_matrix.py --only tabular --write docs/template_matrix.md

Exit code 0 when every row passes. Runs one variant at a time (the machine
is shared); about 10-30 s a row on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tfrepro.project import Project  # noqa: E402
from tfrepro.scaffold.generate import new_project  # noqa: E402

CATALOG = [
    "mixed_precision",
    "mirrored_strategy",
    "xla",
    "eager_debugging",
    "prefetch",
    "parallel_map",
    "cache",
    "shuffle",
    "interleave",
    "callbacks",
    "custom_loop",
    "custom_layer",
    "lr_warmup",
    "gradient_accumulation",
    "sync_batchnorm",
]
TEMPLATES = ["image", "tabular", "sequence"]


@dataclass(frozen=True)
class Row:
    template: str
    label: str
    selected: tuple[str, ...]  # features the project is generated with
    on: tuple[str, ...]  # features rendered ON
    data: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Outcome:
    row: Row
    ok: bool
    seconds: float
    losses: tuple[float, ...]
    error: str = ""


def rows(templates: list[str]) -> list[Row]:
    out: list[Row] = []
    for t in templates:
        out.append(Row(t, "baseline (all blocks present, OFF)", tuple(CATALOG), ()))
        for f in CATALOG:
            out.append(Row(t, f, (f,), (f,)))
            if f == "mixed_precision":
                out.append(Row(t, "mixed_precision (bfloat16)", (f,), (f,), (("mixed_precision_dtype", "bfloat16"),)))
        out.append(Row(t, "ALL ON", tuple(CATALOG), tuple(CATALOG)))
        out.append(
            Row(t, "ALL ON (bfloat16)", tuple(CATALOG), tuple(CATALOG), (("mixed_precision_dtype", "bfloat16"),))
        )
    extra = {
        "image": [
            ("npz data, interleave ON", (("data_source", "npz"),)),
            ("TFRecord files, interleave ON", (("data_source", "tfrecord"),)),
            ("image folder, interleave ON", (("data_source", "image_folder"),)),
        ],
        "tabular": [
            ("regression, ALL ON", (("task", "regression"), ("num_targets", "2"))),
            ("TFRecord files, interleave ON", (("data_source", "tfrecord"),)),
        ],
        "sequence": [
            ("GRU, ALL ON", (("sequence_layer", "gru"),)),
            ("attention, ALL ON", (("sequence_layer", "attention"),)),
            ("time series + LSTM, ALL ON", (("task", "regression"),)),
            ("npz data, interleave ON", (("data_source", "npz"),)),
        ],
    }
    for t in templates:
        for label, data in extra[t]:
            feats = ("interleave",) if "interleave ON" in label else tuple(CATALOG)
            out.append(Row(t, label, feats, feats, data))
    return out


def run_row(row: Row, work: Path, steps: int, timeout: float) -> Outcome:
    slug = "".join(c if c.isalnum() else "_" for c in f"{row.template}_{row.label}")
    dest = work / slug
    data = {"features": ",".join(row.selected), **dict(row.data)}
    start = time.perf_counter()
    try:
        new_project(dest, template=row.template, data=data)
        variant = work / f"{slug}.variant"
        Project.load(dest).write_variant(set(row.on), variant)
        env = dict(os.environ, REPRO_STEPS=str(steps), TF_CPP_MIN_LOG_LEVEL="2")
        if (variant / "make_sample_data.py").exists():
            subprocess.run(
                [sys.executable, "make_sample_data.py"],
                cwd=variant,
                env=env,
                check=True,
                capture_output=True,
                timeout=timeout,
            )
        proc = subprocess.run(
            [sys.executable, "repro.py"], cwd=variant, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return Outcome(row, False, time.perf_counter() - start, (), f"timeout after {timeout:.0f} s")
    except Exception as e:  # noqa: BLE001 - a row's failure is a result, not a crash of the matrix
        return Outcome(row, False, time.perf_counter() - start, (), f"{type(e).__name__}: {e}")
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or ["(no stderr)"]
        return Outcome(row, False, seconds, (), f"exit {proc.returncode}: {last[0][:200]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("loss per epoch:")]
    if not lines:
        return Outcome(row, False, seconds, (), "no 'loss per epoch' line")
    losses = tuple(float(x) for x in lines[-1].split(":", 1)[1].strip(" []").split(","))
    ok = all(math.isfinite(x) for x in losses)
    return Outcome(row, ok, seconds, losses, "" if ok else "non-finite loss")


def markdown(outcomes: list[Outcome], steps: int) -> str:
    import platform
    from importlib.metadata import version

    passed = sum(o.ok for o in outcomes)
    head = [
        "# Template matrix: every template x every feature ON",
        "",
        f"Generated by `scripts/template_matrix.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"TensorFlow {version('tensorflow')}, Python {platform.python_version()}, {os.cpu_count()} CPU cores, no GPU; "
        f"{steps} steps a run (`REPRO_STEPS`).",
        "",
        f"**{passed}/{len(outcomes)} rows pass** (exit 0, every epoch loss finite). Seconds include "
        "generating the project and starting TensorFlow, on a machine shared with other jobs: "
        "they are not a benchmark.",
        "",
        "| template | feature ON | ok | s | loss per epoch | error |",
        "|---|---|---|---|---|---|",
    ]
    body = [
        f"| {o.row.template} | {o.row.label} | {'yes' if o.ok else '**NO**'} | {o.seconds:.0f} | "
        f"{', '.join(f'{x:.4g}' for x in o.losses)} | {o.error.replace('|', '/')} |"
        for o in outcomes
    ]
    return "\n".join(head + body) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=TEMPLATES, help="Only these templates (repeatable).")
    ap.add_argument("--steps", type=int, default=6, help="REPRO_STEPS for each run (default 6).")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--filter", default="", help="Only rows whose label contains this text.")
    ap.add_argument("--write", type=Path, help="Write the markdown table here.")
    args = ap.parse_args(argv)
    todo = [r for r in rows(args.only or TEMPLATES) if args.filter in r.label]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="tfrepro-matrix-") as tmp:
        os.environ.setdefault("TFREPRO_CACHE_DIR", str(Path(tmp) / "cache"))
        for i, row in enumerate(todo, 1):
            o = run_row(row, Path(tmp), args.steps, args.timeout)
            outcomes.append(o)
            print(
                f"[{i}/{len(todo)}] {row.template:<8} {row.label:<40} {'ok ' if o.ok else 'FAIL'} "
                f"{o.seconds:5.1f}s {o.error}",
                flush=True,
            )
    text = markdown(outcomes, args.steps)
    if args.write:
        args.write.write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
