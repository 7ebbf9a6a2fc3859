#!/usr/bin/env bash
# fresh_bench.sh NAME REV CMD...: clone main at REV into /tmp/fb-NAME, install, run CMD there; log /work/runs/NAME.log
set -u
name=$1; rev=$2; shift 2
d=/tmp/fb-$name; rm -rf "$d"
log=/work/runs/$name.log
{
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) avx512f=$(grep -c avx512f /proc/cpuinfo)"
git clone -q /work/main "$d" && cd "$d" && git checkout -q "$rev" && echo "commit $(git rev-parse --short HEAD)"
python3.11 -m venv .venv && .venv/bin/pip install -q -e '.[test]' 2>&1 | grep -v '^WARNING: Location'
( while sleep 60; do echo "load $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done ) > /work/runs/$name.load &
lp=$!
t0=$(date +%s)
"$@"
echo "rc $?"
kill $lp
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) wall $(( $(date +%s)-t0 )) s"
} > "$log" 2>&1
rm -rf "$d/.venv"
