"""Product code lines a range of history added, split by what each
first-parent commit says it was for (issue 23's size ceiling: 17,000 lines
"with features other issues add later on top").

Every first-parent commit from BASE to HEAD is one row: the lines it added
minus the lines it removed in tfrepro/**/*.py (templates and examples
aside, as in code_size.py), and its subject. A row goes to the first group
whose pattern its subject matches; the rest are "other". The patterns are
the commit subjects' own words, so a row's group is only as good as its
subject: print the rows (--rows) and read them.

    python benchmarks/size_by_issue.py b4a2796 4b282a3 --rows
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PATHS = ["tfrepro/*.py", ":!tfrepro/templates", ":!tfrepro/examples"]

# A subject naming issues 24-28 (their merges and follow-ups).
LATER = r"issue 2[4-8]|'(confine|rest24|loops|wild|repro|replicas|h-wild-2|h-repro-2)'|merge (wild|loops|repro)"
# A subject naming issue 23's own redesign work (its branches and its "one X" steps).
REDESIGN = (
    r"issue 23|lead23|h-lines|h-types|h-bundle|h-manifest|h-issue|tbx|one typed answer|one trial value"
    r"|one probe runner|one SIGTERM|evidence_doc|TrialRow once|typed once|evidence-sized|cut along its seams"
    r"|through the trial spawner|presentation lives|one B C B|one trial log|purpose is an enum|one trials-table row"
)
GROUPS = {"issues 24-28": LATER, "issue 23": REDESIGN, "issue 22": r"fix22|issue 22|tests22"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def delta(commit: str) -> int:
    added = removed = 0
    for line in git("diff", "--numstat", f"{commit}^1", commit, "--", *PATHS).splitlines():
        a, r, _ = line.split("\t", 2)
        if a != "-":
            added, removed = added + int(a), removed + int(r)
    return added - removed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("head")
    ap.add_argument("--rows", action="store_true", help="print every commit that changed the count")
    args = ap.parse_args()
    sums = {name: [0, 0] for name in [*GROUPS, "other"]}
    for commit in git("rev-list", "--first-parent", "--reverse", f"{args.base}..{args.head}").split():
        d = delta(commit)
        subject = git("log", "-1", "--format=%s", commit).strip()
        group = next((name for name, pat in GROUPS.items() if re.search(pat, subject)), "other")
        sums[group][0] += d
        sums[group][1] += 1
        if args.rows and d:
            print(f"{d:+6d}  {group:13s} {commit[:7]} {subject[:100]}")
    for name, (lines, n) in sums.items():
        print(f"{name:13s} {lines:+7,d} lines in {n} commits")
    print(f"{'all':13s} {sum(s[0] for s in sums.values()):+7,d} lines")


if __name__ == "__main__":
    main()
