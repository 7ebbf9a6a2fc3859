"""`tfrepro report --out DIR` never deletes what it did not write (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_fakes import ScriptedRunner, build, make_project, make_run

from tfrepro.cli import main
from tfrepro.errors import UserError
from tfrepro.report.bundle import MANIFEST


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(make_project(tmp_path), "nan", ["mixed_precision"])


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def shape(rel: str) -> str:
    """A bundle path with the event file's name (time, host) left out."""
    return rel.rsplit("/", 1)[0] + "/<events>" if "tfevents" in rel else rel


def test_a_bundle_beside_a_git_checkout_is_refused_and_nothing_is_deleted(run, tmp_path, monkeypatch):
    from tfrepro.report import envreport

    monkeypatch.setattr(envreport, "collect", lambda **kw: {"tf_version": "9.9.9"})
    repo = tmp_path / "myrepo"
    build(run, ScriptedRunner(), out=repo)  # a previous bundle...
    (repo / ".git" / "objects").mkdir(parents=True)  # ...then the user's work lands beside it
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "src").mkdir()
    (repo / "src" / "train.py").write_text("print('years of work')\n")
    before = snapshot(repo)
    r = CliRunner().invoke(main, ["report", str(run), "--out", str(repo), "--no-rerun", "--no-localize"])
    assert r.exit_code == 2, r.output
    [message] = [line for line in r.output.splitlines() if "did not write" in line]
    assert "tfrepro did not write" in message and ".git/HEAD" in message and "nothing was deleted" in message
    assert "new or empty directory" in r.output
    assert snapshot(repo) == before
    assert (repo / ".git" / "objects").is_dir()


def test_a_plain_directory_of_user_files_is_refused(run, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(UserError, match="did not write"):
        build(run, ScriptedRunner(), out=precious)
    assert snapshot(precious) == {"thesis.tex": b"years of work"}


def test_rewriting_an_earlier_bundle_replaces_exactly_its_files(run, tmp_path):
    out = tmp_path / "bundle"
    first = build(run, ScriptedRunner(), out=out)
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert {"repro.py", "reference.py", "ISSUE.md", "report.json", "result.json", "loss.png"} <= set(listed)
    assert sorted(listed) == sorted(p for p in snapshot(out) if p != MANIFEST)
    (out / "notes").mkdir()  # an empty directory holds nothing to lose: it stays
    (out / "ISSUE.md").write_text("edited by hand, then regenerated")
    again = build(run, ScriptedRunner(), out=out)
    assert again.out == first.out
    assert (out / "ISSUE.md").read_text().startswith("# NaN/Inf loss with mixed_precision")
    relisted = json.loads((out / MANIFEST).read_text())["files"]
    assert sorted(map(shape, relisted)) == sorted(map(shape, listed))  # no stale file left behind
    assert sorted(relisted) == sorted(p for p in snapshot(out) if p != MANIFEST)
    assert (out / "notes").is_dir()


def test_a_bundle_written_before_the_manifest_is_still_replaced(run, tmp_path):
    out = tmp_path / "old"
    build(run, ScriptedRunner(), out=out)
    (out / MANIFEST).unlink()
    build(run, ScriptedRunner(), out=out)
    assert (out / MANIFEST).is_file() and (out / "repro.py").is_file()
