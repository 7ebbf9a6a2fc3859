"""`tfrepro new` / `tfrepro update` and the templates, without TensorFlow.

Real copier, real git repositories in temp dirs (isolated git config), the
packaged templates. What runs TensorFlow is in test_templates_e2e.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import git
import pytest
import yaml
from click.testing import CliRunner

from tfrepro import features as fb
from tfrepro.cli import main
from tfrepro.errors import TfreproError, UserError
from tfrepro.project import Project
from tfrepro.scaffold.generate import PACKAGED_TEMPLATES, available_templates, ensure_template_repo, new_project

CATALOG = [
    "mixed_precision",
    "mirrored_strategy",
    "xla",
    "eager_debugging",
    "prefetch",
    "parallel_map",
    "cache",
    "shuffle",
    "interleave",
    "callbacks",
    "custom_loop",
    "custom_layer",
    "lr_warmup",
    "gradient_accumulation",
    "sync_batchnorm",
]
DEFAULT_FEATURES = {"prefetch", "parallel_map", "cache", "shuffle", "callbacks"}
# Code that only a feature's block may hold: the exported baseline must not
# contain it, the exported all-ON variant must.
FEATURE_CODE = {
    "mixed_precision": "set_global_policy(",
    "mirrored_strategy": "MirroredStrategy(",
    "xla": "JIT_COMPILE = True",
    "eager_debugging": "run_functions_eagerly(True)",
    "prefetch": ".prefetch(",
    "parallel_map": "num_parallel_calls",
    "cache": ".cache()",
    "shuffle": ".shuffle(",
    "interleave": ".interleave(",
    "callbacks": "EarlyStopping(",
    "custom_loop": "GradientTape()",
    "custom_layer": "CustomLayer(",
    "lr_warmup": "LinearWarmup(",
    "gradient_accumulation": "GradientAccumulator(",
    "sync_batchnorm": "synchronized=True",
}


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("TFREPRO_CACHE_DIR", str(home / "cache"))
    monkeypatch.delenv("TFREPRO_TEMPLATES_DIR", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var, value in [
        ("GIT_AUTHOR_NAME", "T"),
        ("GIT_AUTHOR_EMAIL", "t@example.com"),
        ("GIT_COMMITTER_NAME", "T"),
        ("GIT_COMMITTER_EMAIL", "t@example.com"),
        ("GIT_AUTHOR_DATE", "2026-01-01T00:00:00"),
        ("GIT_COMMITTER_DATE", "2026-01-01T00:00:00"),
    ]:
        monkeypatch.setenv(var, value)


def _new(tmp: Path, template: str, features: list[str], **data) -> Path:
    dest = tmp / f"{template}-{len(features)}"
    new_project(dest, template=template, data={"features": ",".join(features), **data})
    return dest


@pytest.fixture(scope="module")
def all_on_projects(tmp_path_factory):
    """One project per template with the whole catalog selected."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("mod")
    mp.setenv("TFREPRO_CACHE_DIR", str(home / "cache"))
    mp.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    mp.setenv("GIT_AUTHOR_NAME", "T")
    mp.setenv("GIT_AUTHOR_EMAIL", "t@example.com")
    try:
        yield {t: _new(home, t, CATALOG) for t in ("image", "tabular", "sequence")}
    finally:
        mp.undo()


def test_three_templates_are_shipped():
    assert available_templates() == ["image", "script", "sequence", "tabular"]  # script: new --from
    assert (PACKAGED_TEMPLATES / "VERSION").read_text().strip()


@pytest.mark.parametrize("template", ["image", "tabular", "sequence"])
def test_every_catalog_feature_is_a_block_written_off(all_on_projects, template):
    project = Project.load(all_on_projects[template])
    assert set(project.feature_names) == set(CATALOG)
    assert set(project.states_in_files().values()) == {False}
    assert project.affects_loss == {"lr_warmup", "shuffle", "interleave", "callbacks", "custom_layer"}
    # The file as written is the baseline: rendering it with nothing on changes nothing.
    text = (project.root / "repro.py").read_text()
    assert project.render(set())["repro.py"] == text


@pytest.mark.parametrize("template", ["image", "tabular", "sequence"])
def test_exported_baseline_is_only_data_model_train(all_on_projects, template):
    project = Project.load(all_on_projects[template])
    baseline = project.render(set(), export=True)["repro.py"]
    compile(baseline, "repro.py", "exec")
    assert "tfrepro" not in baseline
    leaked = [name for name, code in FEATURE_CODE.items() if code in baseline]
    assert leaked == []
    for section in ("def make_dataset", "def build_model", "model.fit("):
        assert section in baseline
    full = project.render(set(CATALOG), export=True)["repro.py"]
    compile(full, "repro.py", "exec")
    assert "tfrepro" not in full
    assert [name for name, code in FEATURE_CODE.items() if code not in full] == []


def test_only_the_selected_features_get_blocks(tmp_path):
    dest = _new(tmp_path, "tabular", ["xla", "custom_loop"])
    project = Project.load(dest)
    assert project.feature_names == ("custom_loop", "xla")
    assert project.affects_loss == frozenset()
    text = (dest / "repro.py").read_text()
    assert "EarlyStopping" not in text and "strategy" not in text


def test_defaults_project_is_committed_in_git(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["new", str(tmp_path / "r"), "--template", "tabular", "--defaults"])
    assert result.exit_code == 0, result.output
    assert "features, all OFF: " in result.output
    dest = tmp_path / "r"
    repo = git.Repo(dest)
    assert not repo.is_dirty(untracked_files=True)
    assert len(list(repo.iter_commits())) == 1
    tracked = set(repo.git.ls_files().splitlines())
    assert {
        "repro.py",
        "tfrepro.toml",
        "README.md",
        ".copier-answers.yml",
        "tests/test_repro.py",
        ".gitignore",
    } <= tracked
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text())
    assert answers["_commit"] == (PACKAGED_TEMPLATES / "VERSION").read_text().strip()
    assert set(answers["features"]) == DEFAULT_FEATURES
    assert set(Project.load(dest).feature_names) == DEFAULT_FEATURES
    assert ".tfrepro/" in (dest / ".gitignore").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name != "r"], "staging left behind"


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["-d", "batch_size=-4"], "batch_size"),
        (["-d", "batch_size=many"], "batch_size"),
        (["-d", "features=prefetch,warp_drive"], "unknown features: warp_drive"),
        (["-d", "optimiser=adam"], "has no question 'optimiser'"),
        (["-d", "optimizer=adagrad"], "optimizer='adagrad' is not one of the choices"),
        (["-d", "input_shape=28,28"], "input_shape"),
        (["-d", "loss=mse"], "loss"),
        (["-d", "steps"], "bad --data item"),
        (["--template", "audio", "--defaults"], "unknown template 'audio'"),
    ],
)
def test_invalid_answers_exit_2_and_write_nothing(tmp_path, args, message):
    result = CliRunner().invoke(main, ["new", str(tmp_path / "r"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert _leftovers(tmp_path) == []


def test_no_parent_directories_are_left_behind(tmp_path):
    result = CliRunner().invoke(main, ["new", str(tmp_path / "a" / "b" / "r"), "-d", "batch_size=0"])
    assert result.exit_code == 2
    assert _leftovers(tmp_path) == []


def test_no_features_at_all(tmp_path):
    dest = _new(tmp_path, "sequence", [])
    project = Project.load(dest)
    assert project.feature_names == ()
    assert "tfrepro" not in (dest / "repro.py").read_text()


def test_destination_not_empty_is_refused_untouched(tmp_path):
    dest = tmp_path / "r"
    dest.mkdir()
    (dest / "mine.py").write_text("x = 1\n")
    result = CliRunner().invoke(main, ["new", str(dest), "--defaults"])
    assert result.exit_code == 2
    assert "destination is not empty" in result.stderr
    assert _leftovers(dest) == ["mine.py"] and _leftovers(tmp_path) == ["r"]


def test_an_empty_destination_directory_is_used(tmp_path):
    (tmp_path / "r").mkdir()
    result = CliRunner().invoke(main, ["new", str(tmp_path / "r"), "--defaults", "-t", "sequence"])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "r" / "repro.py").is_file()


def test_without_a_terminal_new_needs_defaults_or_data(tmp_path):
    result = CliRunner().invoke(main, ["new", str(tmp_path / "r")], input="")
    assert result.exit_code == 2
    assert "--defaults" in result.stderr
    assert _leftovers(tmp_path) == []


def test_data_sources_come_with_their_loading_code(tmp_path):
    for source, code in [
        ("npz", "np.load(DATA_PATH)"),
        ("tfrecord", "tf.data.TFRecordDataset"),
        ("image_folder", "image_dataset_from_directory"),
    ]:
        dest = tmp_path / source
        new_project(dest, template="image", data={"data_source": source, "features": "interleave"})
        text = (dest / "repro.py").read_text()
        assert code in text
        assert (dest / "make_sample_data.py").is_file()
        compile((dest / "make_sample_data.py").read_text(), "make_sample_data.py", "exec")
    assert not (tmp_path / "npz" / "make_sample_data.py").read_text().count("tfrepro")
    with pytest.raises(UserError, match="data_source='image_folder'"):
        new_project(tmp_path / "t", template="tabular", data={"data_source": "image_folder"})


# -- the git-versioned template cache ----------------------------------------


def _template_copy(tmp_path: Path) -> Path:
    src = tmp_path / "templates"
    shutil.copytree(PACKAGED_TEMPLATES, src, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _edit_template(src: Path, old: str, new: str, version: str | None) -> None:
    path = src / "_shared" / "project" / "repro.py.jinja"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    if version:
        (src / "VERSION").write_text(version + "\n")


def test_cache_tags_each_template_content_once(tmp_path, monkeypatch):
    src = _template_copy(tmp_path)
    monkeypatch.setenv("TFREPRO_TEMPLATES_DIR", str(src))
    first = ensure_template_repo("tabular")
    assert first.tag == (src / "VERSION").read_text().strip()
    assert ensure_template_repo("tabular") == first  # same content: same commit, same tag
    _edit_template(src, "# ---- data ---", "# ---- data (edited) ---", None)
    second = ensure_template_repo("tabular")
    assert second.tag == f"{first.tag}.post1" and second.commit != first.commit
    _edit_template(src, "(edited)", "(v9)", "9.0.0")
    third = ensure_template_repo("tabular")
    assert third.tag == "9.0.0"
    tags = {t.name for t in git.Repo(third.path).tags}
    assert tags == {first.tag, second.tag, "9.0.0"}
    _edit_template(src, "(v9)", "(older)", "1.0.0")
    with pytest.raises(TfreproError, match="older than 9.0.0"):
        ensure_template_repo("tabular")


# -- update ------------------------------------------------------------------


@pytest.fixture
def versioned(tmp_path, monkeypatch):
    """A project made from a template copy at version N (1.0.0), with a user
    edit committed."""
    src = _template_copy(tmp_path)
    (src / "VERSION").write_text("1.0.0\n")
    monkeypatch.setenv("TFREPRO_TEMPLATES_DIR", str(src))
    dest = tmp_path / "proj"
    new_project(dest, template="tabular", data={"features": "prefetch,xla", "learning_rate": "0.001"})
    repro = dest / "repro.py"
    repro.write_text(repro.read_text().replace("LEARNING_RATE = 0.001", "LEARNING_RATE = 0.003  # my edit"))
    repo = git.Repo(dest)
    repo.git.commit("-am", "my learning rate")
    return src, dest, repo


def test_update_brings_template_change_and_keeps_user_edit(versioned):
    src, dest, repo = versioned
    _edit_template(src, "# ---- model ---", "# ---- model (template v1.1) ---", "1.1.0")
    result = CliRunner().invoke(main, ["update", str(dest)])
    assert result.exit_code == 0, result.stderr
    assert "1.0.0 -> 1.1.0" in result.output
    text = (dest / "repro.py").read_text()
    assert "# ---- model (template v1.1) ---" in text
    assert "LEARNING_RATE = 0.003  # my edit" in text
    assert yaml.safe_load((dest / ".copier-answers.yml").read_text())["_commit"] == "1.1.0"
    assert Project.load(dest).feature_names == ("prefetch", "xla")
    assert repo.head.commit.message.strip() == "my learning rate"  # left for the user to review and commit


def test_update_says_why_it_cannot_run(versioned):
    """Up to date, uncommitted changes, no answers file, no git: each a clear
    message (exit 2 for the errors), the project untouched."""
    src, dest, repo = versioned
    runner = CliRunner()
    result = runner.invoke(main, ["update", str(dest)])
    assert result.exit_code == 0 and "already at template tabular 1.0.0" in result.output

    _edit_template(src, "# ---- model ---", "# ---- model (v1.1) ---", "1.1.0")
    (dest / "repro.py").write_text((dest / "repro.py").read_text() + "\n# wip\n")
    result = runner.invoke(main, ["update", str(dest)])
    assert result.exit_code == 2
    assert "uncommitted changes (repro.py)" in result.stderr and "git commit" in result.stderr
    assert (dest / "repro.py").read_text().endswith("# wip\n")
    repo.git.checkout("--", "repro.py")

    repo.git.rm(".copier-answers.yml")
    repo.git.commit("-m", "drop answers")
    result = runner.invoke(main, ["update", str(dest)])
    assert result.exit_code == 2
    assert "no .copier-answers.yml" in result.stderr and "tfrepro new" in result.stderr
    repo.git.revert("--no-edit", "HEAD")

    shutil.rmtree(dest / ".git")
    result = runner.invoke(main, ["update", str(dest)])
    assert result.exit_code == 2
    assert "not a git repository" in result.stderr and "git init" in result.stderr
    assert "(v1.1)" not in (dest / "repro.py").read_text()


def test_update_after_the_cache_was_lost(versioned, monkeypatch, tmp_path):
    src, dest, _ = versioned
    shutil.rmtree(Path(os.environ["TFREPRO_CACHE_DIR"]))
    _edit_template(src, "# ---- model ---", "# ---- model (v1.1) ---", "1.1.0")
    result = CliRunner().invoke(main, ["update", str(dest)])
    assert result.exit_code == 2
    assert "template version 1.0.0" in result.stderr and "not in the template cache" in result.stderr


def test_generated_files_parse_as_the_marker_grammar(all_on_projects):
    for template, dest in all_on_projects.items():
        for path in dest.rglob("*.py"):
            fb.parse(path.read_text(), str(path))  # raises on a malformed block
        assert subprocess.run(["git", "status", "--porcelain"], cwd=dest, capture_output=True, text=True).stdout == ""
