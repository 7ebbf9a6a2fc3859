"""Scriptable everywhere: with --json every error path prints exactly one JSON
object on stdout (nothing else), every result command has --json, options a
bisect mode would ignore are refused, and exit codes follow Contract 4."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from gitrepo import GitRepo, isolated_git_env

from tfrepro.bisect import versions
from tfrepro.cli import main
from tfrepro.trials.values import RunResult, Status

LOOP = "print('step=1 loss=1.0')\n"

# Every command that prints a result takes --json.
JSON_COMMANDS = [
    "annotate",
    "bisect",
    "check",
    "clean",
    "demo",
    "env",
    "envs",
    "features",
    "new",
    "report",
    "run",
    "update",
]


def test_every_result_command_has_json():
    assert sorted(n for n, c in main.commands.items() if any("--json" in p.opts for p in c.params)) == JSON_COMMANDS


def _one_json_object(stdout: str) -> dict:
    assert stdout.count("\n") == 1 and stdout.endswith("\n"), stdout  # one line, nothing else
    return json.loads(stdout)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "repro.py").write_text(LOOP)
    return tmp_path / "p"


def _invoke(args: list[str]):
    return CliRunner().invoke(main, args)


def test_error_paths_print_one_json_object(project, tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "repro.py").write_text(LOOP)
    (tmp_path / "bad" / "tfrepro.toml").write_text("[trial]\nsteps = -3\n")
    cases = [
        (["features", str(tmp_path / "nowhere"), "--json"], 2, "no such file or directory"),
        (["bisect", str(project), "--strategy", "bogus", "--json"], 2, "Invalid value for '--strategy'"),
        (["run", str(project), "--steps", "0", "--json"], 2, "Invalid value for '--steps'"),
        (["features", str(tmp_path / "bad"), "--json"], 2, "[trial] steps must be at least 1, not -3"),
        (["run", str(project), "--with", "nope", "--json"], 2, "nope"),
        (["--bogus", "--json"], 2, "No such option '--bogus'."),
        (["frobnicate", "--json"], 2, "No such command 'frobnicate'."),
    ]
    for args, code, text in cases:
        r = _invoke(args)
        assert r.exit_code == code, (args, r.output)
        doc = _one_json_object(r.stdout)
        assert doc["status"] == "error" and doc["exit_code"] == code and text in doc["error"], (args, doc)


def test_bad_good_revision_in_commit_mode_is_bad_input(tmp_path, monkeypatch):
    isolated_git_env(tmp_path / "home", monkeypatch)
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    repo.commit("loop", {"repro.py": LOOP})
    r = _invoke(["bisect", str(repo.root), "--good", "no-such-rev", "--bad", "HEAD", "--json"])
    assert r.exit_code == 2, r.output
    doc = _one_json_object(r.stdout)
    assert doc["status"] == "error" and "no-such-rev" in doc["error"]


def test_ctrl_c_is_130_with_one_json_object(project, monkeypatch):
    from tfrepro.trials import state

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(state, "clean_project", interrupted)
    r = _invoke(["clean", str(project), "--json"])
    assert r.exit_code == 130
    doc = _one_json_object(r.stdout)
    assert doc["status"] == "interrupted" and doc["exit_code"] == 130 and "run the same command again" in doc["error"]
    r = _invoke(["clean", str(project)])
    assert r.exit_code == 130 and r.stdout == "" and r.stderr.startswith("Error: interrupted")


@pytest.mark.parametrize(
    "args, refused",
    [
        (["--tf-versions", "2.15.1,2.16.2", "--jobs", "2"], "version mode does not use --jobs"),
        (["--tf-versions", "2.15.1,2.16.2", "--executor", "ray"], "version mode does not use --executor ray"),
        (
            ["--tf-versions", "2.15.1,2.16.2", "--repeats", "3", "--strategy", "ddmin"],
            "version mode does not use --strategy, --repeats",
        ),
        (["--tf-versions", "2.15.1,2.16.2", "--only", "a"], "version mode does not use --only"),
        (["--tf-versions", "2.15.1,2.16.2", "--good", "HEAD~3"], "--good HEAD~3 is not a TensorFlow release"),
        (["--tf-versions", "2.15.1,2.16.2", "--bad", "main"], "--bad main is not a TensorFlow release"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--repeats", "2"], "commit mode does not use --repeats"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--strategy", "ddmin"], "commit mode does not use --strategy"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--skip", "a"], "commit mode does not use --skip"),
        (["--good", "HEAD~1", "--bad", "HEAD", "--keras", "legacy"], "commit mode does not use --keras legacy"),
        (["--tf-dist", "tensorflow-cpu"], "feature mode does not use --tf-dist"),
        (["--address", "10.0.0.5:6379"], "feature mode does not use --address (without --executor ray)"),
    ],
)
def test_options_a_mode_ignores_are_refused(project, args, refused):
    r = _invoke(["bisect", str(project), *args, "--json"])
    assert r.exit_code == 2, r.output
    assert _one_json_object(r.stdout)["error"].startswith(refused)


EXIT = {"found": 0, "baseline-fails": 1, "error": 1, "none": 3, "flaky": 4, "ambiguous": 4}


@pytest.mark.parametrize("status", sorted(EXIT))
def test_bisect_exit_codes_in_every_mode(project, monkeypatch, status):
    """Each mode's engine is replaced by a recorder: the CLI must hand it the
    project and the range asked for, print its document whole and exit with
    Contract 4's code for its status (EXIT, written out here, not the
    product's table)."""
    from tfrepro.cli import display

    calls = {}

    def engine(mode, run_dir):
        def fake(*args, **kw):
            calls[mode] = (args, kw)
            return RunResult(Status(status), run_dir=run_dir)

        return fake

    monkeypatch.setattr(display, "run_bisect", engine("features", "r-features"))
    r = _invoke(["bisect", str(project), "--json"])
    doc = _one_json_object(r.stdout)
    assert (r.exit_code, doc) == (EXIT[status], RunResult(Status(status), run_dir="r-features").to_dict())
    assert calls["features"][0][0].root == project.resolve()

    monkeypatch.setattr("tfrepro.bisect.commits.bisect_commits", engine("commits", "r-commits"))
    r = _invoke(["bisect", str(project), "--good", "HEAD~1", "--bad", "HEAD", "--json"])
    doc = _one_json_object(r.stdout)
    assert (r.exit_code, doc["status"], doc["run_dir"]) == (EXIT[status], status, "r-commits")
    assert calls["commits"][0][1:3] == ("HEAD~1", "HEAD")

    if status != "flaky":  # version mode is never flaky
        monkeypatch.setattr(versions, "bisect_versions", engine("versions", "r-versions"))
        r = _invoke(["bisect", str(project), "--tf-versions", "2.15.1,2.16.2", "--json"])
        doc = _one_json_object(r.stdout)
        assert (r.exit_code, doc["status"], doc["run_dir"]) == (EXIT[status], status, "r-versions")
        assert list(calls["versions"][0][1]) == ["2.15.1", "2.16.2"]


def test_envs_and_annotate_json(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = _invoke(["envs", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["environments"] == []
    r = _invoke(["envs", "--prune", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["removed"] == []
    script = tmp_path / "train.py"
    script.write_text(
        "import tensorflow as tf\nimport keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
    )
    r = _invoke(["annotate", str(script), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["features"] == ["mixed_precision"] and doc["found"][0]["line"] == 3
    assert doc["diff"].startswith("---") and "written" not in doc
