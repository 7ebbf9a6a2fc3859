"""Project loading, the manifest (Contract 2), variants, and `tfrepro features`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tfrepro.cli import main
from tfrepro.errors import UserError
from tfrepro.project import Manifest, Project

REPRO = """\
import os

# tfrepro: feature mixed_precision -- mixed_float16 compute policy
POLICY = "mixed_float16"
# tfrepro: end

# tfrepro: feature lr_warmup -- linear warmup
# LR = "warmup"
# tfrepro: else
LR = "constant"
# tfrepro: end
print(POLICY if "POLICY" in dir() else "float32", LR)
"""


def make_project(tmp_path: Path, manifest: str | None = None, files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    (root / "repro.py").write_text(REPRO)
    (root / "util.py").write_text("# tfrepro: feature mixed_precision\n# HALF = True\n# tfrepro: end\n")
    (root / "data.bin").write_bytes(b"\x00\x01binary")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if manifest is not None:
        (root / "tfrepro.toml").write_text(manifest)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_defaults_without_manifest(tmp_path):
    p = Project.load(make_project(tmp_path))
    assert p.manifest.trial.steps == 50 and p.manifest.trial.timeout_s == 300
    assert p.manifest.trial.deterministic is True and p.manifest.repeats == 1
    assert p.manifest.symptoms.slowdown == 1.25 and p.manifest.symptoms.mismatch == 0.05
    assert p.feature_names == ("lr_warmup", "mixed_precision")
    assert set(p.sources) == {"repro.py", "util.py"}
    assert p.states_in_files() == {"lr_warmup": False, "mixed_precision": None}


def test_manifest_values_are_read(tmp_path):
    root = make_project(
        tmp_path,
        """
[trial]
entry = "repro.py"
steps = 20
timeout_s = 60
repeats = 3
seed = 7
deterministic = false

[symptoms]
nan = true
slowdown = 1.5
mismatch = 0.01

[features.lr_warmup]
affects_loss = true
""",
    )
    p = Project.load(root)
    t = p.manifest.trial
    assert (t.steps, t.timeout_s, t.seed, t.deterministic) == (20, 60.0, 7, False)
    assert p.manifest.repeats == 3
    assert p.manifest.symptoms.slowdown == 1.5 and p.manifest.symptoms.mismatch == 0.01
    assert p.affects_loss == frozenset({"lr_warmup"})


@pytest.mark.parametrize(
    "toml,line,fragment",
    [
        ("[trial]\nsteps = 10\nstep = 5\n", 3, "unknown key `step`"),
        ('[trial]\nsteps = "ten"\n', 2, "expected int"),
        ("[trial]\nsteps = true\n", 2, "got a boolean"),
        ("[trial]\nsteps = 0\n", 2, "at least 1"),
        ("[symptoms]\nslowdown = 0.9\n", 2, "ratio above 1"),
        ("[symptoms]\nnan = 1\n", 2, "expected bool"),
        ("[extra]\nx = 1\n", 1, "unknown table"),
        ("[features.nope]\naffects_loss = true\n", 1, "no file marks"),
        ("[features.lr_warmup]\naffects = true\n", 2, "unknown key `affects`"),
        ("[trial]\nsteps = = 3\n", 2, "not valid TOML"),
        ('[trial]\nentry = "missing.py"\n', 2, "does not exist"),
        ("[trial]\ncommand = []\n", 2, "non-empty list"),
    ],
)
def test_bad_manifest_is_a_clear_error(tmp_path, toml, line, fragment):
    root = make_project(tmp_path, toml)
    with pytest.raises(UserError) as info:
        Project.load(root)
    assert info.value.where == f"{root / 'tfrepro.toml'}:{line}"
    assert fragment in info.value.message


def test_command_instead_of_entry(tmp_path):
    m = Manifest.parse('[trial]\ncommand = ["python", "train.py", "--fast"]\n')
    assert m.trial.command == ("python", "train.py", "--fast")


def test_variant_is_rendered_into_dest_and_user_files_untouched(tmp_path):
    root = make_project(tmp_path, files={"pkg/model.py": "X = 1\n", ".tfrepro/cache/old.json": "{}"})
    before = snapshot(root)
    p = Project.load(root)
    dest = tmp_path / "variant"
    p.write_variant({"lr_warmup"}, dest)
    assert snapshot(root) == before
    out = (dest / "repro.py").read_text()
    assert '\nLR = "warmup"\n' in out and '# POLICY = "mixed_float16"' in out
    assert (dest / "util.py").read_text().count("# HALF") == 1
    assert (dest / "data.bin").read_bytes() == b"\x00\x01binary"
    assert (dest / "pkg/model.py").exists() and not (dest / ".tfrepro").exists()


def test_variant_hash_depends_on_rendered_content_only(tmp_path):
    p = Project.load(make_project(tmp_path))
    assert p.variant_hash(set()) == p.variant_hash([])
    assert p.variant_hash({"lr_warmup"}) != p.variant_hash(set())
    other = Project.load(make_project(tmp_path / "copy"))
    assert other.variant_hash({"lr_warmup"}) == p.variant_hash({"lr_warmup"})
    before = p.variant_hash(set())
    (p.root / "data.bin").write_bytes(b"changed!")
    assert Project.load(p.root).variant_hash(set()) != before


@pytest.mark.parametrize("bad", ["missing_dir", "notes.txt"])
def test_bad_paths_are_exit_2(tmp_path, bad):
    (tmp_path / "notes.txt").write_text("hello")
    r = CliRunner().invoke(main, ["features", str(tmp_path / bad)])
    assert r.exit_code == 2
    assert str(tmp_path / bad) in r.output


def test_features_cli_lists_names_states_and_places(tmp_path):
    root = make_project(tmp_path)
    r = CliRunner().invoke(main, ["features", str(root), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    by_name = {f["name"]: f for f in data["features"]}
    assert by_name["mixed_precision"]["state"] == "mixed"
    assert by_name["mixed_precision"]["description"] == "mixed_float16 compute policy"
    assert by_name["mixed_precision"]["blocks"] == [
        {"file": "repro.py", "line": 3, "state": "on"},
        {"file": "util.py", "line": 1, "state": "off"},
    ]
    text = CliRunner().invoke(main, ["features", str(root)]).output
    assert "lr_warmup" in text and "repro.py:7" in text


def test_features_set_round_trip_restores_every_byte(tmp_path):
    root = make_project(tmp_path)
    before = snapshot(root)
    r = CliRunner().invoke(main, ["features", str(root), "--set", "mixed_precision=off,lr_warmup=on"])
    assert r.exit_code == 0, r.output
    changed = snapshot(root)
    assert changed != before
    assert '\nLR = "warmup"\n' in (root / "repro.py").read_text()
    r = CliRunner().invoke(main, ["features", str(root), "--set", "lr_warmup=off"])
    assert r.exit_code == 0
    # mixed_precision was mixed as written (on in repro.py, off in util.py): restore repro.py's block
    src = (root / "repro.py").read_text().replace('# POLICY = "mixed_float16"', 'POLICY = "mixed_float16"')
    (root / "repro.py").write_text(src)
    assert snapshot(root) == before


def test_features_set_rejects_unknown_names_and_writes_nothing(tmp_path):
    root = make_project(tmp_path)
    before = snapshot(root)
    r = CliRunner().invoke(main, ["features", str(root), "--set", "lr_warmup=on,nope=off"])
    assert r.exit_code == 2 and "unknown feature: nope" in r.output
    r = CliRunner().invoke(main, ["features", str(root), "--set", "lr_warmup=maybe"])
    assert r.exit_code == 2 and "NAME=on" in r.output
    assert snapshot(root) == before


def test_malformed_marker_in_any_file_is_exit_2_with_file_line(tmp_path):
    root = make_project(tmp_path, files={"sub/broken.py": "x = 1\n# tfrepro: end\n"})
    r = CliRunner().invoke(main, ["features", str(root)])
    assert r.exit_code == 2
    assert f"{root / 'sub/broken.py'}:2" in r.output
    assert "outside any feature block" in r.output


def test_a_manifest_naming_a_feature_another_commit_had_is_a_warning_in_zero_edit_mode(tmp_path):
    # `git bisect run tfrepro run train.py` checks out older commits whose
    # unmarked script lacks a feature the current tfrepro.toml names
    (tmp_path / "train.py").write_text("import tensorflow as tf\nds = tf.data.Dataset.range(4).prefetch(2)\n")
    (tmp_path / "tfrepro.toml").write_text(
        '[trial]\nentry = "train.py"\n\n[features.gone_since]\naffects_loss = true\n'
    )
    p = Project.load(tmp_path)
    assert p.detected and "gone_since" not in p.feature_names
    assert any("[features.gone_since]" in w for w in p.warnings)


def test_a_project_of_its_own_below_is_not_part_of_this_ones_features(tmp_path):
    # `tfrepro new myrepro` inside a repository: its marked repro.py belongs
    # to myrepro (its own tfrepro.toml), not to the repository's train.py
    (tmp_path / "train.py").write_text("import tensorflow as tf\nds = tf.data.Dataset.range(4).prefetch(2)\n")
    sub = tmp_path / "myrepro"
    sub.mkdir()
    (sub / "tfrepro.toml").write_text("[trial]\nsteps = 5\n")
    (sub / "repro.py").write_text("# tfrepro: feature cache -- cache\n# x = 1\n# tfrepro: end\n")
    (tmp_path / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\n')
    p = Project.load(tmp_path)
    assert p.detected and "cache" not in p.feature_names and "prefetch" in p.feature_names
    assert Project.load(sub).feature_names == ("cache",)


def test_choosing_features_keeps_what_loading_warned_about(tmp_path):
    # `--only`/`--skip` build the project anew without the left-out features:
    # the warnings of loading (here a table naming no detected feature) are
    # still the user's to read
    (tmp_path / "train.py").write_text("import tensorflow as tf\nds = tf.data.Dataset.range(4).cache().prefetch(2)\n")
    (tmp_path / "tfrepro.toml").write_text(
        '[trial]\nentry = "train.py"\n\n[features.gone_since]\naffects_loss = true\n'
    )
    everything = Project.load(tmp_path)
    for chosen in (Project.load(tmp_path, only=["prefetch"]), Project.load(tmp_path, skip=["prefetch"])):
        assert chosen.feature_names != everything.feature_names
        assert any("[features.gone_since]" in w for w in chosen.warnings)
