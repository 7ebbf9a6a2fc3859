"""Product code size, per package: lines, and code lines without blank,
comment-only and docstring lines (read with ast). Templates and examples
are not product code.

    python benchmarks/code_size.py            # this checkout's tfrepro/
    python benchmarks/code_size.py --rev 4e92f5e   # a commit's (git archive)
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP = {"templates", "examples"}


def count(src: str) -> Counter:
    lines = src.splitlines()
    c = Counter(total=len(lines))
    c["blank"] = sum(1 for line in lines if not line.strip())
    c["comment"] = sum(1 for line in lines if line.strip().startswith("#"))
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                c["docstring"] += first.end_lineno - first.lineno + 1
    c["code"] = c["total"] - c["blank"] - c["comment"] - c["docstring"]
    return c


def sizes(pkg: Path) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = path.relative_to(pkg).parts
        if parts[0] in SKIP:
            continue
        group = f"{parts[0]}/" if len(parts) > 1 else "top-level modules"
        out.setdefault(group, Counter()).update(count(path.read_text(encoding="utf-8")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", help="a commit to measure instead of the working tree")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pkg = REPO / "tfrepro"
        if args.rev:
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.rev, "tfrepro"], capture_output=True, check=True
            ).stdout
            archive_path = Path(tmp) / "src.tar"
            archive_path.write_bytes(archive)
            with tarfile.open(archive_path) as tar:
                tar.extractall(tmp, filter="data")
            pkg = Path(tmp) / "tfrepro"
        groups = sizes(pkg)
        keys = ("total", "code", "docstring", "comment", "blank")
        print(f"{'package':<20}" + "".join(f"{k:>10}" for k in keys))
        for name, c in sorted(groups.items()):
            print(f"{name:<20}" + "".join(f"{c[k]:>10}" for k in keys))
        every = sum(groups.values(), Counter())
        print(f"{'all':<20}" + "".join(f"{every[k]:>10}" for k in keys))


if __name__ == "__main__":
    main()
