#!/usr/bin/env bash
# fresh_suite.sh NAME [ENV=VAL...]: git clone main's HEAD, then the README's test command; log to /work/runs/NAME.log
set -u
name=$1; shift
d=/tmp/fresh-$name; rm -rf "$d"
log=/work/runs/$name.log
{
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) avx512f=$(grep -c avx512f /proc/cpuinfo)"
git clone -q /work/main "$d" && cd "$d" && echo "commit $(git rev-parse --short HEAD)"
t0=$(date +%s)
env "$@" bash -c "python3.11 -m venv .venv && .venv/bin/pip install -q -e '.[test]' 2>&1 | grep -v '^WARNING: Location' ; t1=\$(date +%s); echo pip \$((t1-$t0)) s; .venv/bin/pytest -q -p no:cacheprovider 2>&1 | tail -25; echo pytest-end \$(date -u +%FT%TZ) pytest \$(( \$(date +%s)-t1 )) s"
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) total $(( $(date +%s)-t0 )) s"
} > "$log" 2>&1
rm -rf "$d"
