"""A refactor keeps every answer: the feature engine on fake trials (the
engine tests' `FakeRunner`, the flaky cases of `flaky_fakes.py`) at this
checkout and at another commit, seed by seed; each bisect's status,
culprits, trial count and whole trials table (configuration, role, repeat,
verdict) must be the same.

    python benchmarks/same_answers.py --against REV [--seeds 200]

Exit 0 when every answer is the same, 1 (and the first difference) when not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = ("fixed_step", "varying_step", "everywhere")


def answers(repo: Path, seeds: int) -> list:
    """Every answer of the engine at `repo`: that tree's tfrepro, this
    checkout's fakes and cases (so both sides run the same trials)."""
    sys.path.insert(0, str(repo))
    import tfrepro  # first: the modules below find it loaded (flaky_fakes puts this checkout on the path)
    from tfrepro.bisect.engine import bisect

    if not Path(tfrepro.__file__).resolve().is_relative_to(repo.resolve()):
        raise SystemExit(f"tfrepro came from {tfrepro.__file__}, not from {repo}")
    sys.path[1:1] = [str(REPO / "tests"), str(REPO / "benchmarks")]
    import flaky_fakes
    import test_engine as fakes

    out = []
    with tempfile.TemporaryDirectory(prefix="same-answers-") as tmp:
        for case in CASES:
            for seed in range(seeds):
                project = fakes.make_project(Path(tmp) / f"{case}-{seed}", fakes.FEATS)
                doc = bisect(project, runner=fakes.FakeRunner(flaky_fakes.behaviour(case, seed))).to_dict()
                rows = [[r["enabled"], r["role"], r["repeat"], r["verdict"]] for r in doc["trials_table"]]
                out.append([case, seed, doc["status"], doc["culprits"], doc["trials"], rows])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="the commit to compare with")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # one side, in a child
    args = ap.parse_args()
    if args.tree is not None:
        json.dump(answers(args.tree, args.seeds), sys.stdout)
        return 0
    with tempfile.TemporaryDirectory(prefix="same-answers-wt-") as wt:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", wt, args.against], check=True)
        try:
            sides = [
                json.loads(
                    subprocess.run(
                        [sys.executable, __file__, "--tree", str(tree), "--seeds", str(args.seeds)],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                )
                for tree in (Path(wt), REPO)
            ]
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", wt], check=False)
    old, new = sides
    trials = sum(a[4] for a in new)
    for a, b in zip(old, new, strict=True):
        if a != b:
            print(f"differs: {a[0]} seed {a[1]}: {args.against}: {a[2:5]}; here: {b[2:5]}")
            return 1
    print(f"{len(new)} bisects, {trials} trials: every answer and trials table the same as at {args.against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
