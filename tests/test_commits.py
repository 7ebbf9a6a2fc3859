"""Commit bisection over real git repositories, with a scripted trial.

The trial here reads the checked-out project (so it sees exactly what the
bisection checked out) and plays a tiny, fast stand-in for the trial runner:
a file that does not compile crashes with a SyntaxError, a `LOSS = nan` line
goes non-finite at step 3, anything else trains cleanly. The real runner is
exercised in test_commits_e2e.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from gitrepo import GitRepo, isolated_git_env

from tfrepro.bisect import commits
from tfrepro.bisect.events import BisectOptions
from tfrepro.errors import UserError
from tfrepro.settings import (
    TIMING_MIN_STEPS,
    TIMING_MIN_TIME_S,
    TIMING_STEPS_MAX,
    WARMUP_STEPS,
    TrialSettings,
)
from tfrepro.trials.timing import TIMING_BASELINE, TIMING_CANDIDATE
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

GOOD_SRC = "LOSS = 1.0\nprint('step=1 loss=1.0')\n"
NAN_SRC = "LOSS = nan\nprint('step=1 loss=nan')\n"
BROKEN_SRC = "LOSS = 1.0\ndef broken(:\n"


class ScriptedTrial:
    """Stand-in for `run_trial`: the verdict follows from the checked-out source."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.repeats: list[int] = []
        self.settings: list[TrialSettings] = []

    def __call__(self, project, enabled, settings, how=TrialOptions()):
        label = how.label
        assert enabled == ()  # commit mode runs the project as written
        self.labels.append(label)
        self.settings.append(settings)
        assert project.sources == {}  # as written: nothing rendered
        src = (project.root / settings.entry).read_text()
        try:
            compile(src, settings.entry, "exec")
        except SyntaxError:
            return TrialResult(label=label, crashed=True, exit_code=1, error="SyntaxError: invalid syntax", mode="none")
        if "crash" in src:
            kind = src.split("crash ")[1].split()[0]
            return TrialResult(
                label=label, crashed=True, exit_code=1, error=f"{kind}: boom", losses=(1.0,), mode="loop", steps_run=1
            )
        scale = float(src.split("LOSS = ")[1].split()[0]) if "LOSS = " in src and "nan" not in src else 1.0
        losses = (1.0, 0.9, math.nan) if "nan" in src else tuple(scale * x for x in (1.0, 0.9, 0.8, 0.7))
        self.repeats.append(settings.repeat)
        slow = re.search(r"SLOW(\d*)", src)
        step = 0.01 * (float(slow.group(1) or 3) if slow else 1.0)
        times, extra = (step,) * len(losses), {}
        if settings.timing:  # a time budget of steady steps; others_cpu as the harness measures it
            if "TIMINGFAIL" in src:
                return TrialResult(label=label, crashed=True, exit_code=1, error="OSError: boom", mode="loop")
            times = (0.5,) * WARMUP_STEPS + (step,) * settings.min_steps
            extra = {"others_cpu": 0.6 if "LOADED" in src else 0.0}
        return TrialResult(
            label=label,
            losses=losses,
            mode="loop",
            steps_run=len(times),
            first_nonfinite_step=3 if "nan" in src else None,
            step_times=times,
            weights_finite=True,
            extra=extra,
        )


def bisect_commits(*args, **kwargs) -> dict:
    return commits.bisect_commits(*args, **kwargs).to_dict()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> GitRepo:
    isolated_git_env(tmp_path / "home", monkeypatch)
    return GitRepo.init(tmp_path / "repo", tmp_path / "home")


def history(repo: GitRepo, n: int, first_bad: int, broken: set[int] = frozenset()) -> list[str]:
    """Commits 0..n-1 of proj/repro.py: NaN from `first_bad` on, a syntax error at `broken`."""
    for i in range(n):
        src = NAN_SRC if i >= first_bad else GOOD_SRC
        if i in broken:
            src = BROKEN_SRC
        repo.commit(f"commit {i}", {"proj/repro.py": src, "proj/notes.txt": f"{i}\n"})
    return repo.commits


def dirty_the_tree(repo: GitRepo) -> None:
    """A stash entry, a modified tracked file, an untracked file."""
    repo.write("proj/notes.txt", "stashed edit\n")
    repo.git("stash", "push", "-q", "-m", "wip")
    repo.write("proj/repro.py", "print('my uncommitted edit')\n")
    repo.write("proj/scratch.py", "x = 1\n")


def test_finds_the_planted_regression_skips_the_untestable_and_touches_nothing(repo):
    # commit 8 is the first midpoint the search tries: the skip is on its path
    shas = history(repo, 17, first_bad=11, broken={8})
    dirty_the_tree(repo)
    before = repo.snapshot("proj/repro.py", "proj/scratch.py", "proj/notes.txt")
    git_dir = {p: p.read_bytes() for p in sorted((repo.root / ".git").rglob("*")) if p.is_file()}
    trial = ScriptedTrial()

    result = bisect_commits(repo.root / "proj", shas[0], "HEAD", trial=trial)

    # not one byte of .git was written (no worktree metadata, no index, no refs)
    assert {p: p.read_bytes() for p in sorted((repo.root / ".git").rglob("*")) if p.is_file()} == git_dir

    assert result["status"] == "found"
    assert result["symptom"] == "nan"
    assert result["first_bad_commit"] == shas[11]
    assert result["commit"]["subject"] == "commit 11"
    assert result["commit"]["author"] == "Ada Tester <ada@example.com>"
    assert result["culprits"] == [] and result["candidates"] == []
    tried = {t["sha"]: t["verdict"] for t in result["tried"]}
    assert tried[shas[0]] == "ok" and tried[shas[16]] == "nan"
    assert tried[shas[8]] == "untestable"
    assert tried[shas[11]] == "nan" and tried[shas[10]] == "ok"
    # 16 steps between the ends: the two ends, log2(16) midpoints, one skip
    assert result["trials"] == len(trial.labels) == len(result["tried"]) <= 2 + 4 + 1
    assert repo.snapshot("proj/repro.py", "proj/scratch.py", "proj/notes.txt") == before


def test_a_skip_on_the_way_is_listed_and_the_answer_still_exact(repo):
    shas = history(repo, 9, first_bad=6, broken={4})
    result = bisect_commits(repo.root / "proj", shas[0], shas[8], trial=ScriptedTrial())
    assert result["first_bad_commit"] == shas[6]
    skipped = [t for t in result["tried"] if t["verdict"] == "untestable"]
    assert [t["sha"] for t in skipped] == [shas[4]]
    assert "SyntaxError" in skipped[0]["reason"] and "crash while hunting nan" in skipped[0]["reason"]


def test_skips_next_to_the_regression_give_candidates_not_a_guess(repo):
    shas = history(repo, 9, first_bad=5, broken={4})
    result = bisect_commits(repo.root / "proj", shas[0], shas[8], trial=ScriptedTrial())
    assert result["status"] == "ambiguous"
    assert result["first_bad_commit"] is None
    assert [c["sha"] for c in result["candidates"]] == [shas[4], shas[5]]
    assert "candidate" in result["message"]


def test_good_end_with_the_symptom_is_baseline_fails(repo):
    shas = history(repo, 5, first_bad=0)
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[4], trial=trial)
    assert result["status"] == "baseline-fails"
    assert "already shows nan" in result["message"] and shas[0][:12] in result["message"]
    assert trial.labels == [shas[0]]  # nothing else was tried


def test_bad_end_without_the_symptom_is_none(repo):
    shas = history(repo, 5, first_bad=99)
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[4], trial=trial)
    assert result["status"] == "none"
    assert "does not show any symptom" in result["message"]
    result = bisect_commits(repo.root / "proj", shas[0], shas[4], BisectOptions(symptom=Verdict.NAN), trial=trial)
    assert result["status"] == "none" and "does not show nan" in result["message"]


def test_a_mismatch_is_hunted_against_the_good_end_run_twice_for_noise(repo):
    for i in range(8):
        repo.commit(f"c{i}", {"proj/repro.py": f"LOSS = {1.0 if i < 6 else 1.5}\n"})
    shas = repo.commits
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[-1], trial=trial)
    assert (result["symptom"], result["first_bad_commit"]) == ("mismatch", shas[6])
    assert sorted(trial.repeats).count(1) == 1  # the good end's second run
    tiny = bisect_commits(repo.root / "proj", shas[0], shas[5], trial=ScriptedTrial())
    assert tiny["status"] == "none"  # identical losses: nothing to hunt


def timing_trials(trial: ScriptedTrial) -> list[tuple[str, int]]:
    """(sha, repeat) of each timing trial, in the order run."""
    return [(sha, s.repeat) for sha, s in zip(trial.labels, trial.settings) if s.timing]


def test_a_slowdown_is_hunted_against_one_shared_pool_of_good_end_timing_trials(repo):
    for i in range(6):
        repo.commit(f"c{i}", {"proj/repro.py": "x = 1  # SLOW\n" if i >= 4 else f"x = {i}\n"})
    shas = repo.commits
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[-1], trial=trial)
    assert (result["symptom"], result["first_bad_commit"]) == ("slowdown", shas[4])
    assert {t["sha"]: t["verdict"] for t in result["tried"]}[shas[3]] == "ok"
    # B C B C B ...: each tried point's timing trial between two of the good
    # end's, each of those serving the points on both sides of it
    timed = timing_trials(trial)
    good = [(shas[0], TIMING_BASELINE + k) for k in range(len(timed) // 2 + 1)]
    assert timed[::2] == good
    assert [sha for sha, _ in timed[1::2]] == [shas[-1], shas[2], shas[3], shas[4]]
    assert {r for _, r in timed[1::2]} == {TIMING_CANDIDATE}  # one clear pair each (3x, quiet)
    # the ordinary trials: each end once, each tried point once
    assert [s.repeat for s in trial.settings if not s.timing] == [0] * 5
    assert result["timing"]["fast"] and result["timing"]["ratio"] == pytest.approx(3.0)


def test_a_10x_slower_bad_end_is_decided_on_one_clear_pair(repo):
    repo.commit("c0", {"proj/repro.py": "x = 0\n"})
    repo.commit("c1", {"proj/repro.py": "x = 1  # SLOW10\n"})
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", repo.commits[0], repo.commits[1], trial=trial)
    assert (result["status"], result["first_bad_commit"]) == ("found", repo.commits[1])
    # both ends once, then good, bad, good timing trials (the unpaired test took 3 pairs: 2 + 6)
    assert result["trials"] == len(trial.labels) == 5
    assert timing_trials(trial) == [
        (repo.commits[0], TIMING_BASELINE),
        (repo.commits[1], TIMING_CANDIDATE),
        (repo.commits[0], TIMING_BASELINE + 1),
    ]
    t = result["timing"]
    assert t["fast"] and len(t["pairs"]) == 1 and t["pairs"][0]["quiet"] and t["ratio"] == pytest.approx(10.0)
    for s in trial.settings:  # a time budget for timing trials, `steps` for the others
        budget = (TIMING_MIN_TIME_S, TIMING_MIN_STEPS, TIMING_STEPS_MAX) if s.timing else (0.0, 0, 0)
        assert (s.min_time_s, s.min_steps, s.steps_max) == budget


def test_the_timing_budget_reaches_commit_modes_timing_trials(repo):
    # `tfrepro bisect --good A --bad B --timing-budget 2.5`
    repo.commit("c0", {"proj/repro.py": "x = 0\n"})
    repo.commit("c1", {"proj/repro.py": "x = 1  # SLOW10\n"})
    trial = ScriptedTrial()
    result = bisect_commits(
        repo.root / "proj", repo.commits[0], repo.commits[1], BisectOptions(timing_budget_s=2.5), trial=trial
    )
    assert result["status"] == "found"
    budgets = {s.min_time_s for s in trial.settings if s.timing}
    assert budgets == {2.5}


def test_a_vs_a_bad_end_is_not_slower_on_one_clear_pair(repo):
    repo.commit("c0", {"proj/repro.py": "x = 0\n"})
    repo.commit("c1", {"proj/repro.py": "x = 1\n"})
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", *repo.commits, BisectOptions(symptom=Verdict.SLOWDOWN), trial=trial)
    assert result["status"] == "none" and "does not show slowdown" in result["message"]
    assert result["trials"] == 5 and len(timing_trials(trial)) == 3


def test_on_a_loaded_machine_a_3x_slowdown_takes_two_clear_pairs_and_10x_one(repo):
    # others used 60% of the CPUs: up to 2.5x of a trial's time could be load;
    # 3x does not clear 1.75 / (1 - 0.6), 10x does (slowdown.TimingPair.decisive)
    for i, src in enumerate(["x = 0  # LOADED\n", "x = 1  # SLOW3 LOADED\n", "x = 2  # SLOW10 LOADED\n"]):
        repo.commit(f"c{i}", {"proj/repro.py": src})
    shas = repo.commits
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[1], BisectOptions(symptom=Verdict.SLOWDOWN), trial=trial)
    assert result["status"] == "found" and len(result["timing"]["pairs"]) == 2
    assert result["timing"]["pairs"][0]["others"] == [0.6, 0.6, 0.6]
    assert [sha for sha, _ in timing_trials(trial)] == [shas[0], shas[1]] * 2 + [shas[0]]
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[2], BisectOptions(symptom=Verdict.SLOWDOWN), trial=trial)
    assert result["first_bad_commit"] == shas[1]
    # the bad end (10x) on one pair, the midpoint (3x) on two
    assert [sha for sha, _ in timing_trials(trial)[1::2]] == [shas[2], shas[1], shas[1]]


def test_a_timing_run_that_crashes_stops_timing_with_a_verdict(repo):
    # a point whose timing trial crashes is a skip with that reason; a bad end's is an error
    for i in range(7):
        src = "x = 1  # SLOW\n" if i >= 5 else "x = 3  # TIMINGFAIL\n" if i == 3 else f"x = {i}\n"
        repo.commit(f"c{i}", {"proj/repro.py": src})
    shas = repo.commits
    result = bisect_commits(repo.root / "proj", shas[0], shas[6], trial=ScriptedTrial())
    assert (result["status"], result["first_bad_commit"]) == ("found", shas[5])
    tried = {t["sha"]: t for t in result["tried"]}
    assert (tried[shas[3]]["verdict"], tried[shas[3]]["reason"]) == ("untestable", "could not be timed (crash)")
    trial = ScriptedTrial()
    result = bisect_commits(repo.root / "proj", shas[0], shas[3], BisectOptions(symptom=Verdict.SLOWDOWN), trial=trial)
    assert result["status"] == "untestable" and "could not be timed (crash)" in result["message"]
    assert len(timing_trials(trial)) == 2  # the good end's first, the crash: nothing after it
    # nothing asked: the bad end that could not be timed shows nothing, and says why
    result = bisect_commits(repo.root / "proj", shas[0], shas[3], trial=ScriptedTrial())
    assert result["status"] == "none" and result["message"].endswith(
        "(it shows nothing; it could not be timed (crash))"
    )


def test_a_rerun_of_a_slowdown_hunt_asks_for_the_same_timing_trials(repo):
    for i in range(6):
        repo.commit(f"c{i}", {"proj/repro.py": "x = 1  # SLOW\n" if i >= 3 else f"x = {i}\n"})
    shas = repo.commits
    first, again = ScriptedTrial(), ScriptedTrial()
    bisect_commits(repo.root / "proj", shas[0], shas[-1], trial=first)
    bisect_commits(repo.root / "proj", shas[0], shas[-1], trial=again)
    assert list(zip(first.labels, first.settings)) == list(zip(again.labels, again.settings))


def test_hunting_a_crash_skips_other_crashes(repo):
    srcs = ["x = 1\n"] * 3 + ["crash KeyError\n"] + ["x = 2\n"] * 2 + ["crash ValueError\n"] * 3
    for i, s in enumerate(srcs):
        repo.commit(f"c{i}", {"proj/repro.py": s})
    shas = repo.commits
    result = bisect_commits(repo.root / "proj", shas[0], shas[-1], trial=ScriptedTrial())
    assert result["symptom"] == "crash"
    assert result["first_bad_commit"] == shas[6]
    reasons = {t["sha"]: t.get("reason", "") for t in result["tried"]}
    if shas[3] in reasons:
        assert "different crash" in reasons[shas[3]]


def test_commits_without_the_project_are_skipped_and_bad_markers_run_as_written(repo):
    repo.commit("c0", {"proj/repro.py": GOOD_SRC})
    repo.commit("c1", {"proj/repro.py": GOOD_SRC + "# tfrepro: feature xla\n"})  # unclosed block
    repo.git("rm", "-q", "proj/repro.py")
    repo.commit("c2 removes the entry", {"proj/train.py": GOOD_SRC})
    repo.git("rm", "-q", "-r", "proj")
    repo.commit("c3 removes the project", {"other.txt": "x\n"})
    repo.commit("c4", {"proj/repro.py": NAN_SRC})
    repo.commit("c5", {"proj/repro.py": NAN_SRC + "x = 1\n"})
    shas = repo.commits
    result = bisect_commits(repo.root / "proj", shas[0], shas[5], trial=ScriptedTrial())
    verdicts = {t["subject"]: (t["verdict"], t.get("reason", "")) for t in result["tried"]}
    assert verdicts["c1"][0] == "ok"
    assert verdicts["c2 removes the entry"] == ("untestable", "the project does not load at this commit: no repro.py")
    assert verdicts["c3 removes the project"][0] == "untestable"
    assert "cannot check out 'proj'" in verdicts["c3 removes the project"][1]
    assert result["first_bad_commit"] is None
    assert [c["subject"] for c in result["candidates"]] == ["c2 removes the entry", "c3 removes the project", "c4"]


def test_result_and_trial_log_land_in_the_run_dir(repo):
    shas = history(repo, 5, first_bad=3)
    result = bisect_commits(repo.root / "proj", shas[0], shas[4], trial=ScriptedTrial())
    run_dir = Path(result["run_dir"])
    assert json.loads((run_dir / "result.json").read_text()) == json.loads(json.dumps(result))
    log = [json.loads(x) for x in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert len(log) == result["trials"] == len(result["trials_table"])
    row = result["trials_table"][-1]
    assert row["verdict"] in ("ok", "nan") and row["role"] == f"commit {row['sha'][:12]}"
    summary = json.loads((run_dir / row["summary"]).read_text())
    assert summary["label"] == row["sha"] and summary["losses"]
    assert {e["sha"] for e in log} >= {shas[0], shas[4]}
    assert not list((repo.root / "proj" / ".tfrepro" / "checkouts").glob("*/*"))
    # what the bug report needs: both commits' code, both trials' losses, the settings
    assert (Path(result["first_bad_project"]) / "repro.py").read_text() == NAN_SRC
    assert (Path(result["good_project"]) / "repro.py").read_text() == GOOD_SRC
    assert result["failing"]["label"] == shas[3] and result["failing"]["first_nonfinite_step"] == 3
    assert result["baseline"]["losses"] == [1.0, 0.9, 0.8, 0.7]
    assert result["settings"]["entry"] == "repro.py"
    assert result["project"] == str((repo.root / "proj").resolve())


def test_path_may_be_the_entry_script(repo):
    for i in range(4):
        repo.commit(f"c{i}", {"proj/train.py": NAN_SRC if i == 3 else GOOD_SRC})
    result = bisect_commits(repo.root / "proj" / "train.py", repo.commits[0], "HEAD", trial=ScriptedTrial())
    assert result["first_bad_commit"] == repo.commits[3]
    # The script's project is the repository it sits in, as in feature mode
    # (one root for every mode: tests/test_one_root.py).
    assert result["settings"]["entry"] == "proj/train.py"
    assert result["project"] == str(repo.root.resolve())


def test_bad_input_is_a_user_error(repo):
    shas = history(repo, 3, first_bad=2)
    with pytest.raises(UserError, match="unknown revision"):
        bisect_commits(repo.root / "proj", "v0.0.0", shas[2], trial=ScriptedTrial())
    with pytest.raises(UserError, match="slowdown needs steps past"):
        bisect_commits(
            repo.root / "proj",
            shas[0],
            shas[2],
            BisectOptions(symptom=Verdict.SLOWDOWN, steps=3),
            trial=ScriptedTrial(),
        )


def test_range_modes_read_tfrepro_toml_as_feature_mode_does(tmp_path):
    """One reader of tfrepro.toml: a directory in its place is the same UserError in every mode."""
    (tmp_path / "tfrepro.toml").mkdir()
    with pytest.raises(UserError, match="is a directory"):
        commits.range_settings(tmp_path, None, BisectOptions())
    (tmp_path / "tfrepro.toml").rmdir()
    (tmp_path / "tfrepro.toml").write_text("[trial]\nsteps = 7\n")
    assert commits.range_settings(tmp_path, None, BisectOptions())[0].steps == 7


def test_range_modes_apply_the_command_line_as_feature_mode_does(tmp_path):
    """One rule for the command-line overrides of `[trial]`: --budget-s reaches a
    range bisection's trials (it was silently ignored there), and one past the
    trial timeout is the same UserError as in feature mode."""
    from tfrepro.project import read_manifest

    (tmp_path / "tfrepro.toml").write_text("[trial]\nsteps = 7\ntimeout_s = 100\n")
    options = BisectOptions(budget_s=20.0)
    settings = commits.range_settings(tmp_path, None, options)[0]
    assert (settings.steps, settings.budget_s) == (7, 20.0)
    assert settings == options.trial_settings(read_manifest(tmp_path)[1].trial)  # feature mode's (engine)
    with pytest.raises(UserError, match="--budget-s 200 must be less than the trial timeout"):
        commits.range_settings(tmp_path, None, BisectOptions(budget_s=200.0))
