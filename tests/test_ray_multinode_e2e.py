"""Ray on loopback only, for real: a private instance despite a stale cluster
file, and a two-node cluster where a node dies mid-hunt.

Every process of these tests runs in a network namespace the test creates
(`unshare -n`, or `unshare -rn` without root), whose only interface is
loopback: nothing can reach another address even by mistake. A sampler
inside the namespace records `ss -tnp` / `ss -tlnp` all along and stops the
cluster at once if a socket has any address but 127.0.0.1; the test then
asserts that it never saw one.

The two nodes are `ray start --head --node-ip-address=127.0.0.1` and `ray
start --address=127.0.0.1:PORT --node-ip-address=127.0.0.1`, each with its
own --temp-dir and TMPDIR, 1 CPU each: the project reaches a node only
through Ray (the executor ships it as a tar), results come back only
through Ray. The planted project is a few `print`s (no TensorFlow), so the
test costs Ray's start-up and a few dozen tiny trials.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'tfrepro[ray]'")
pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).parent / "ray"

# NaN only when fp16 and big_lr are both on (ddmin finds the pair). On the
# worker node (TFREPRO_TEST_NODE=worker), once the kill flag exists, a trial
# says so on stdout and waits; the test kills that node's raylet (by pid)
# when the line shows in the node's trial log: the node dies mid-trial.
SCRIPT = """\
import os, time
if os.environ.get("TFREPRO_TEST_NODE") == "worker" and os.path.exists(os.environ["TFREPRO_TEST_KILL_FLAG"]):
    print("KILL-ME", flush=True)  # the test kills this node's raylet when it reads this line
    time.sleep(120)
lr, half = 0.1, False
# tfrepro: feature warmup -- harmless
# lr = 0.1
# tfrepro: end
# tfrepro: feature fp16 -- half of the NaN
# half = True
# tfrepro: end
# tfrepro: feature big_lr -- the other half
# lr = 3.0
# tfrepro: end
# tfrepro: feature logging -- harmless
# verbose = True
# tfrepro: end
loss = 2.0
for step in range(1, 6):
    loss = float("nan") if half and lr > 1 and step >= 3 else loss * (1 - lr / 10)
    print(f"step={step} loss={loss}", flush=True)
"""

# Inside the namespace: loopback up, the sampler, then the scenario ($1).
NETNS = r"""
set -u
ip link set lo up
(
  while [ ! -e "$WORK/stop-sampler" ]; do
    { ss -tnpH; ss -tlnpH; } >> "$WORK/ss.log" 2>/dev/null
    if { ss -tnH; ss -tlnH; } | awk '{print "L " $4; print "P " $5}' \
        | grep -vE '^L (127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]|\[::1\]):[0-9]+$' \
        | grep -vE '^P ((127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]|\[::1\]):[0-9]+|(0\.0\.0\.0|\*|\[::\]):\*)$' \
        | grep -q .; then
      echo violation >> "$WORK/violation"; "$RAY" stop --force >/dev/null 2>&1
    fi
    sleep 0.2
  done
) &
SAMPLER=$!
bash "$1"; rc=$?
touch "$WORK/stop-sampler"; wait $SAMPLER
exit $rc
"""

CLUSTER = r"""
set -u
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
common="--node-ip-address=127.0.0.1 --num-cpus=1 --object-store-memory=80000000 --disable-usage-stats"
start() {  # a loaded machine can miss Ray's 15 s agent start-up: up to 3 tries
  for i in 1 2 3; do
    mkdir -p "$WORK/head/tmp" "$WORK/worker/tmp"
    TMPDIR="$WORK/head/tmp" "$RAY" start --head --port=$PORT --include-dashboard=false \
      --temp-dir="$RAYDIR/h" $common > "$WORK/head.log" 2>&1 &&
    TMPDIR="$WORK/worker/tmp" TFREPRO_TEST_NODE=worker TFREPRO_TEST_KILL_FLAG="$WORK/kill" \
      "$RAY" start --address=127.0.0.1:$PORT --temp-dir="$RAYDIR/w" $common > "$WORK/worker.log" 2>&1 &&
    return 0
    "$RAY" stop --force > /dev/null 2>&1  # this PID namespace's Ray only
  done
  return 1
}
bisect() {
  "$PYTHON" -m tfrepro bisect --executor ray --address 127.0.0.1:$PORT --no-cache --json "$PROJECT" \
    > "$WORK/$1.json" 2> "$WORK/$1.err"
}
start || exit 11
bisect both; rc1=$?
raylet=$(pgrep -f "raylet .*$RAYDIR/w/" | head -1)
touch "$WORK/kill"
(
  while [ ! -e "$WORK/hunt-over" ]; do
    if grep -qs KILL-ME "$WORK"/worker/tmp/tfrepro-ray/*/trial/stdout.log; then
      kill -9 "$raylet" && echo "$raylet" > "$WORK/killed"
      break
    fi
    sleep 0.1
  done
) &
watcher=$!
bisect killed; rc2=$?
touch "$WORK/hunt-over"; wait $watcher
"$RAY" stop --force > /dev/null 2>&1
echo "$rc1 $rc2" > "$WORK/rcs"
"""

STALE = r"""
set -u
export RAY_TMPDIR="$WORK/raytmp"
mkdir -p "$RAY_TMPDIR/ray"
echo "127.0.0.1:9" > "$RAY_TMPDIR/ray/ray_current_cluster"  # a cluster that is gone
"$PYTHON" -m tfrepro bisect --executor ray --json "$PROJECT" > "$WORK/stale.json" 2> "$WORK/stale.err"
echo $? > "$WORK/rcs"
"""


def _namespace() -> list[str]:
    if not shutil.which("unshare") or not shutil.which("ip") or not shutil.which("ss"):
        pytest.skip("needs unshare, ip and ss (util-linux, iproute2)")
    # its own network namespace (loopback only) and PID namespace (`ray stop`
    # sees only this test's Ray; everything dies with the namespace)
    ns = ["unshare", "-npf", "--mount-proc"] if os.geteuid() == 0 else ["unshare", "-rnpf", "--mount-proc"]
    if subprocess.run([*ns, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a network namespace here")
    return ns


def run_in_netns(work: Path, scenario: str, project: Path, timeout: int) -> None:
    (work / "netns.sh").write_text(NETNS)
    (work / "scenario.sh").write_text(scenario)
    raydir = tempfile.mkdtemp(prefix="trn", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
        "WORK": str(work),
        "RAYDIR": raydir,
        "RAY": str(RAY),
        "PYTHON": sys.executable,
        "PROJECT": str(project),
        "PORT": "6390",
        # a loaded machine starts Ray's agents slowly (the raylet's default wait is short)
        "RAY_raylet_start_wait_time_s": "60",
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    try:
        subprocess.run(
            [*_namespace(), "bash", str(work / "netns.sh"), str(work / "scenario.sh")],
            env=env,
            timeout=timeout,
            capture_output=True,
        )
    finally:
        shutil.rmtree(raydir, ignore_errors=True)
        assert_loopback_only(work)


def assert_loopback_only(work: Path) -> None:
    """Every socket the sampler saw: local end on 127.0.0.1, peer on 127.0.0.1
    (or the wildcard of a listening socket)."""
    assert not (work / "violation").exists(), (work / "ss.log").read_text()[-3000:]
    loopback = {"127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"}
    local, peer = set(), set()
    for line in (work / "ss.log").read_text().splitlines():
        fields = line.split()
        local.add(re.sub(r":(\d+|\*)$", "", fields[3]))
        peer.add(re.sub(r":(\d+|\*)$", "", fields[4]))
    assert local, "the sampler saw no socket at all"
    assert local <= loopback and peer <= loopback | {"0.0.0.0", "*", "[::]"}, (local, peer)


def planted(dest: Path) -> Path:
    dest.mkdir(parents=True)
    (dest / "repro.py").write_text(SCRIPT)
    (dest / "tfrepro.toml").write_text("[trial]\nsteps = 5\ntimeout_s = 120\n")
    return dest


def answer(doc: dict) -> tuple:
    return doc["status"], doc["symptom"], doc["culprits"]


def test_a_stale_cluster_file_is_ignored_for_a_private_loopback_instance(tmp_path):
    project = planted(tmp_path / "proj")
    run_in_netns(tmp_path, STALE, project, timeout=600)
    err = (tmp_path / "stale.err").read_text()
    assert (tmp_path / "rcs").read_text().strip() == "0", err[-3000:]
    assert "starting a private local Ray instance" in err
    assert answer(json.loads((tmp_path / "stale.json").read_text())) == ("found", "nan", ["big_lr", "fp16"])


def test_two_loopback_nodes_give_the_local_answer_and_survive_a_node_killed_mid_hunt(tmp_path):
    local = subprocess.run(
        [sys.executable, "-m", "tfrepro", "bisect", "--json", str(planted(tmp_path / "local"))],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    expected = answer(json.loads(local.stdout))
    assert expected == ("found", "nan", ["big_lr", "fp16"])

    project = planted(tmp_path / "proj")
    run_in_netns(tmp_path, CLUSTER, project, timeout=900)
    rcs = (tmp_path / "rcs").read_text().split() if (tmp_path / "rcs").exists() else None
    assert rcs == ["0", "0"], [(tmp_path / f).read_text()[-2000:] for f in ("head.log", "worker.log", "both.err")]

    both = _doc(tmp_path / "both.json")
    assert answer(both) == expected
    nodes = {t["extra"]["node"] for t in _summaries(project, both)}
    assert len(nodes) == 2  # trials ran on both nodes

    killed = _doc(tmp_path / "killed.json")
    assert answer(killed) == expected  # the hunt finished on the surviving node
    assert (tmp_path / "killed").exists()  # the worker node was killed mid-trial
    summaries = _summaries(project, killed)
    retried = [t for t in summaries if t["extra"].get("attempts") == 2]
    assert retried and not any(t["crashed"] or t["could_not_run"] for t in summaries)


def _doc(path: Path) -> dict:
    """The result object: the whole of stdout (Ray's driver's raylet death
    notice goes to stderr under --json, tests/test_json_stdout.py)."""
    return json.loads(path.read_text())


def _summaries(project: Path, doc: dict) -> list[dict]:
    run_dir = Path(doc["run_dir"]) if Path(doc["run_dir"]).is_absolute() else project / doc["run_dir"]
    if not run_dir.exists():
        run_dir = project / ".tfrepro" / "runs" / Path(doc["run_dir"]).name
    return [json.loads((run_dir / r["summary"]).read_text()) for r in doc["trials_table"]]
