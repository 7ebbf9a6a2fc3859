#!/usr/bin/env bash
# Zero-edit detection kept by a refactor: `tfrepro annotate train.py --json` (the features
# found, those left alone, the whole diff with every OFF part) and `tfrepro features
# train.py --json` on every journey and wild script and tests/scripts_annotate, with two
# interpreters whose tfrepro differ (e.g. a fresh clone's venv at the old commit, and this
# checkout's); the outputs must be the same but for the temp dir's path.
#   bash benchmarks/detect_same.sh OLD_PYTHON NEW_PYTHON OUTDIR
set -u
OLD=$1; NEW=$2; OUT=$3; mkdir -p "$OUT/old" "$OUT/new"
cd "$(dirname "$0")/.."
for s in benchmarks/journey/*/train.py benchmarks/wild/*/train.py tests/scripts_annotate/*.py; do
  n=$(echo "$s" | tr '/' '_')
  for side in old new; do
    py=$OLD; [ "$side" = new ] && py=$NEW
    tmp=$(mktemp -d); cp "$s" "$tmp/train.py"
    (cd "$tmp" && "$py" -m tfrepro annotate train.py --json > "$OUT/$side/$n.annotate.json" 2>/dev/null
     echo "rc $?" >> "$OUT/$side/$n.annotate.json"
     "$py" -m tfrepro features train.py --json > "$OUT/$side/$n.features.json" 2>/dev/null
     echo "rc $?" >> "$OUT/$side/$n.features.json")
    rm -rf "$tmp"
  done
done
diff -r "$OUT/old" "$OUT/new" > "$OUT/diff.txt"
grep -v -E '^(<|>)   "project": "/tmp/tmp\.[A-Za-z0-9]+",$|^---$|^[0-9]+c[0-9]+$|^diff -r ' "$OUT/diff.txt" > "$OUT/other.txt"
echo "$(ls "$OUT/new" | wc -l) outputs a side; differences other than the temp dir's path: $(wc -l < "$OUT/other.txt") lines ($OUT/other.txt)"
