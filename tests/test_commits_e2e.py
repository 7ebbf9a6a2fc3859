"""Commit bisection end to end: real repository, real trial runner, real kill.

The planted project is a tiny Python script printing `step=N loss=X` lines
(a custom loop as far as the harness is concerned), so each trial is a real
subprocess through `trial.run_trial` and its cache, without TensorFlow's
start-up cost. History: 17 commits, the loss goes NaN from commit 11 on,
commit 8 (the first midpoint the search tries) has a syntax error, and the
user has a stash entry, a modified tracked file and an untracked file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitrepo import GitRepo, isolated_git_env

from tfrepro.bisect.commits import bisect_commits

REPO_ROOT = Path(__file__).resolve().parents[1]
FIRST_BAD, BROKEN, N = 11, 8, 17

SCRIPT = """\
import os, signal, time
time.sleep({sleep})
{gate}
loss = 2.0
for step in range(1, 100):
    loss = {update}
    print(f"step={{step}} loss={{loss}}", flush=True)
"""
MANIFEST = "[trial]\nsteps = 5\ntimeout_s = 60\n"
USER_FILES = ("proj/repro.py", "proj/scratch.py", "proj/notes.txt", "proj/tfrepro.toml")


def build(repo: GitRepo, sleep: float = 0.0, gate: Path | None = None, hold_after: int = 0) -> list[str]:
    """The planted history; with `gate`: while that file exists, every trial
    notes its start there and those after the first `hold_after` block until
    killed (a bisect that cannot end before the test stops it)."""
    held = (
        f"if os.path.exists({str(gate)!r}):\n"
        f"    with open({str(gate)!r}, 'a') as f:\n        f.write('started\\n')\n"
        f"    if len(open({str(gate)!r}).read().split()) > {hold_after}:\n        signal.pause()"
        if gate
        else ""
    )
    for i in range(N):
        update = "loss * 0.9" if i < FIRST_BAD else "loss * 0.9 if step < 3 else float('nan')"
        src = SCRIPT.format(sleep=sleep, gate=held, update=update)
        if i == BROKEN:
            src += "def broken(:\n"
        files = {"proj/repro.py": src, "proj/notes.txt": f"change {i}\n"}
        if i == 0:
            files["proj/tfrepro.toml"] = MANIFEST
        repo.commit(f"commit {i}", files)
    # the user's uncommitted state: a stash entry, a modified file, an untracked file
    repo.write("proj/notes.txt", "stashed edit\n")
    repo.git("stash", "push", "-q", "-m", "wip")
    repo.write("proj/repro.py", "print('my uncommitted edit')\n")
    repo.write("proj/scratch.py", "x = 1\n")
    return repo.commits


@pytest.fixture
def repo(tmp_path, monkeypatch) -> GitRepo:
    isolated_git_env(tmp_path / "home", monkeypatch)
    return GitRepo.init(tmp_path / "repo", tmp_path / "home")


def check_answer(result: dict, shas: list[str]) -> None:
    assert result["status"] == "found", result.get("message")
    assert result["symptom"] == "nan"
    assert result["first_bad_commit"] == shas[FIRST_BAD]
    assert result["commit"]["subject"] == f"commit {FIRST_BAD}"
    verdicts = {t["sha"]: t["verdict"] for t in result["tried"]}
    assert verdicts[shas[BROKEN]] == "untestable"
    assert verdicts[shas[FIRST_BAD]] == "nan" and verdicts[shas[FIRST_BAD - 1]] == "ok"


@pytest.mark.e2e
def test_real_trials_find_the_regression_and_leave_the_repository_as_it_was(repo):
    shas = build(repo, sleep=0)
    before = repo.snapshot(*USER_FILES)

    result = bisect_commits(repo.root / "proj", shas[0], "main").to_dict()

    check_answer(result, shas)
    # 16 steps between the ends: 2 ends + log2(16) midpoints + the one skip
    assert result["trials"] == len(result["tried"]) <= 2 + 4 + 1
    assert result["baseline"]["steps_run"] == 5
    assert repo.snapshot(*USER_FILES) == before

    again = bisect_commits(repo.root / "proj", shas[0], "main").to_dict()
    assert again["cached_trials"] == again["trials"] == result["trials"]
    assert again["tried"] == result["tried"]
    assert repo.snapshot(*USER_FILES) == before


CHILD = """\
import json, sys
from tfrepro.bisect.commits import bisect_commits
r = bisect_commits(sys.argv[1], sys.argv[2], "main")
print(json.dumps(r.to_dict()))
"""


def _procs_under(root: Path) -> list[int]:
    """The processes whose working directory is inside `root` (a trial runs in its checkout)."""
    out = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if Path(os.readlink(cwd)).is_relative_to(root.resolve()):
                out.append(int(cwd.parent.name))
        except OSError:
            continue
    return out


def _wait_until(cond, within: float) -> bool:
    deadline = time.monotonic() + within
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return cond()


@pytest.mark.e2e
def test_a_bisect_killed_midway_leaves_the_repository_untouched_and_resumes_from_cache(repo, tmp_path):
    gate = tmp_path / "gate"  # three trials finish, the fourth blocks: killed mid-search by construction
    gate.write_text("")
    shas = build(repo, gate=gate, hold_after=3)
    before = repo.snapshot(*USER_FILES)
    proj = repo.root / "proj"
    env = {**repo.env, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(proj), shas[0]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # kill -9 once three trials are logged: mid-search, the fourth trial running
    deadline = time.monotonic() + 60
    logged: list[str] = []
    while time.monotonic() < deadline and child.poll() is None:
        logs = list((proj / ".tfrepro" / "runs").glob("*/trials.jsonl"))
        logged = logs[0].read_text().splitlines() if logs else []
        if len(logged) >= 3:
            break
        time.sleep(0.05)
    assert child.poll() is None, child.communicate()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stderr.close()
    # the orphaned trial (its own session) ends: it notices its parent is gone
    assert _wait_until(lambda: not _procs_under(proj / ".tfrepro"), 30), _procs_under(proj / ".tfrepro")

    assert repo.snapshot(*USER_FILES) == before
    leftovers = list((proj / ".tfrepro" / "checkouts").iterdir())
    assert leftovers  # the killed run could not clean up ...
    assert repo.git("worktree", "list", "--porcelain").count("worktree ") == 1

    gate.unlink()  # the rerun's trials run through
    result = bisect_commits(proj, shas[0], "main").to_dict()

    assert not any(p.exists() for p in leftovers)  # ... the next run did
    check_answer(result, shas)
    assert result["cached_trials"] >= len(logged) >= 3
    assert result["cached_trials"] < result["trials"]  # and it finished the rest itself
    assert repo.snapshot(*USER_FILES) == before


@pytest.mark.e2e
def test_sigterm_stops_the_bisect_and_cleans_up_at_once(repo, tmp_path):
    gate = tmp_path / "gate"  # every trial blocks: SIGTERM arrives while one runs
    gate.write_text("")
    shas = build(repo, gate=gate, hold_after=0)
    before = repo.snapshot(*USER_FILES)
    proj = repo.root / "proj"
    env = {**repo.env, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(proj), shas[0]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        if list((proj / ".tfrepro" / "trials").glob("*/trial.json")):
            break  # a trial is running
        time.sleep(0.02)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=30)
    assert child.returncode != 0 and out == ""
    assert "KeyboardInterrupt" in err
    assert list((proj / ".tfrepro" / "checkouts").iterdir()) == []
    assert repo.snapshot(*USER_FILES) == before


@pytest.mark.e2e
def test_cli_entry_prints_one_json_object_and_exit_codes(repo):
    from click.testing import CliRunner

    from tfrepro.bisect.events import parse_symptom
    from tfrepro.cli import main
    from tfrepro.errors import UserError

    shas = build(repo, sleep=0)
    proj = str(repo.root / "proj")
    r = CliRunner().invoke(main, ["bisect", proj, "--good", shas[0], "--bad", "main", "--json"])
    assert r.exit_code == 0, r.output
    # nothing else: the command prints the answer, one JSON object (stderr: only where trials.csv went)
    assert [line for line in r.stderr.splitlines() if not line.startswith("trials: ")] == []
    doc = json.loads(r.stdout)
    assert doc["first_bad_commit"] == shas[FIRST_BAD] and doc["culprits"] == []

    r = CliRunner().invoke(main, ["bisect", proj, "--good", shas[0], "--bad", shas[5], "--symptom", "nan"])
    assert r.exit_code == 3  # the bad end is healthy: none
    assert f"the bad end {shas[5][:12]} (commit 5) does not show nan" in r.output
    assert "bisecting 6 commits" in r.output

    r = CliRunner().invoke(main, ["bisect", proj, "--good", shas[0]])
    assert r.exit_code == 2 and "needs both --good REV and --bad REV" in r.output
    with pytest.raises(UserError, match="unknown symptom 'oops'"):
        parse_symptom("oops")


@pytest.mark.e2e
def test_bisect_command_in_commit_mode(repo):
    from click.testing import CliRunner

    from tfrepro.cli import main

    shas = build(repo, sleep=0)
    proj = str(repo.root / "proj")
    before = repo.snapshot(*USER_FILES)
    runner = CliRunner()
    r = runner.invoke(main, ["bisect", "--good", shas[0], "--bad", "main", "--json", proj])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["first_bad_commit"] == shas[FIRST_BAD] and doc["status"] == "found"

    r = runner.invoke(main, ["bisect", "--good", shas[0], "--bad", shas[4], "--symptom", "nan", proj])
    assert r.exit_code == 3  # none: the bad end does not show the NaN
    assert f"the bad end {shas[4][:12]} (commit 4) does not show nan" in r.output

    r = runner.invoke(main, ["bisect", "--good", shas[0], proj])
    assert r.exit_code == 2 and "needs both --good REV and --bad REV" in r.output
    r = runner.invoke(main, ["bisect", "--good", "nope", "--bad", "main", proj])
    assert r.exit_code == 2 and "unknown revision 'nope' given to --good" in r.output
    assert repo.snapshot(*USER_FILES) == before
