#!/usr/bin/env bash
# One `tfrepro bisect --json` of a bundled example, on a fresh copy (no cache), with the
# interpreter given: for timing two commits side by side as whole processes, in turn
# (new, old, new, old ...), each interpreter's tfrepro its own (e.g. a worktree's venv).
#   bash benchmarks/case_once.sh PYTHON CASE [ANSWERS_FILE]
# ANSWERS_FILE (default: none) gets one line per run: status, culprits, trials.
PY=$1; CASE=$2; LOG=${3:-/dev/null}
SRC=$("$PY" -c "import tfrepro,os;print(os.path.join(os.path.dirname(tfrepro.__file__),'examples'))")/$CASE
d=$(mktemp -d "${TMPDIR:-/tmp}/case-once-XXXXXX"); cp -r "$SRC" "$d/$CASE"
"$PY" -m tfrepro bisect --json "$d/$CASE" > "$d/out.json" 2>/dev/null; rc=$?
"$PY" -c "import json,sys;r=json.load(open(sys.argv[1]));print(r['status'],r.get('culprits'),r['trials'])" "$d/out.json" >> "$LOG" 2>&1
rm -rf "$d"; exit $rc
