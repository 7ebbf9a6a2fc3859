"""Zero-edit mode: an unmarked project's features detected in memory (no TensorFlow)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from tfrepro.errors import UserError
from tfrepro.project import Project

TRAIN = textwrap.dedent("""\
    import tensorflow as tf
    from tensorflow import keras

    from model import build


    def make_dataset():
        ds = tf.data.Dataset.range(64).map(lambda i: (tf.ones([4]), i % 2)).shuffle(64).batch(8).prefetch(2)
        return ds


    if __name__ == "__main__":
        model = build()
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
        model.fit(make_dataset(), epochs=1, callbacks=[keras.callbacks.CSVLogger("log.csv")])
""")
MODEL = textwrap.dedent("""\
    from tensorflow import keras


    class MyDense(keras.layers.Dense):
        pass


    def build():
        return keras.Sequential([keras.Input((4,)), MyDense(2)])
""")
UNRELATED = "import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy('mixed_float16')\n"


@pytest.fixture
def unmarked(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "other_script.py").write_text(UNRELATED)  # not imported by train.py
    return tmp_path


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.iterdir() if p.is_file()}


def test_an_unmarked_script_is_annotated_in_memory_only(unmarked):
    before = snapshot(unmarked)
    p = Project.load(unmarked / "train.py")
    assert p.detected
    assert set(p.feature_names) == {
        "shuffle",
        "prefetch",
        "jit_compile",
        "callback_csv_logger",
        "custom_layer_my_dense",
    }
    # only the entry and what it imports; never an unrelated script
    assert "mixed_precision" not in p.feature_names
    assert snapshot(unmarked) == before
    # every feature on is the annotated text as written (which runs as the user's code)
    assert p.render(p.feature_names) == p.render(None)
    assert p.render(p.feature_names, export=True)["model.py"] == MODEL
    off = p.render((), export=True)
    assert ".shuffle(" not in off["train.py"] and "jit_compile=False" in off["train.py"]
    assert "MyDense(2)" not in off["model.py"]
    for rel, text in off.items():
        compile(text, rel, "exec")


def test_locations_are_lines_of_the_original_file(unmarked):
    p = Project.load(unmarked / "train.py")
    lines = TRAIN.splitlines()
    ((rel, line),) = p.locations("jit_compile")
    assert rel == "train.py" and "jit_compile=True" in lines[line - 1]
    ((rel, line),) = p.locations("custom_layer_my_dense")
    assert rel == "model.py" and "MyDense(2)" in MODEL.splitlines()[line - 1]
    ((rel, line),) = p.locations("shuffle")
    assert ".shuffle(" in lines[line - 1]


def test_affects_loss_comes_from_the_catalog_and_the_manifest_overrides_it(unmarked):
    # a custom layer's stand-in computes something else: affects_loss by construction
    assert Project.load(unmarked / "train.py").affects_loss == {"shuffle", "custom_layer_my_dense"}
    (unmarked / "tfrepro.toml").write_text(
        '[trial]\nentry = "train.py"\n\n[features.shuffle]\naffects_loss = false\n'
        "\n[features.jit_compile]\naffects_loss = true\n"
    )
    assert Project.load(unmarked).affects_loss == {"jit_compile", "custom_layer_my_dense"}


def test_a_marked_project_keeps_its_markers(tmp_path):
    (tmp_path / "repro.py").write_text(
        "x = 1\n# tfrepro: feature mine\nx = 2\n# tfrepro: end\n"
        "import tensorflow as tf\nds = tf.data.Dataset.range(3).shuffle(3)\n"
    )
    p = Project.load(tmp_path)
    assert not p.detected and p.feature_names == ("mine",)


def test_select_only_and_skip_keep_the_others_on_in_every_variant(unmarked):
    p = Project.load(unmarked / "train.py")
    q = Project.load(unmarked / "train.py", only=["dataset", "jit_compile"], skip=["prefetch"])
    assert q.feature_names == ("jit_compile", "shuffle")
    assert q.excluded["prefetch"] == "--skip" and q.excluded["callback_csv_logger"] == "not in --only"
    base = q.render((), export=True)["train.py"]
    assert ".prefetch(2)" in base and "CSVLogger" in base and ".shuffle(" not in base
    assert Project.load(unmarked / "train.py", skip=["callback"]).feature_names == (
        "custom_layer_my_dense",
        "jit_compile",
        "prefetch",
        "shuffle",
    )
    with pytest.raises(UserError, match="no feature matches 'nope'"):
        Project.load(unmarked / "train.py", only=["nope"])
    assert p.variant_hash(()) != q.variant_hash(())


def test_switching_states_in_files_is_refused_for_detected_features(unmarked):
    p = Project.load(unmarked / "train.py")
    with pytest.raises(UserError, match="detected in memory"):
        p.set_states({"shuffle": False})


def test_detection_can_be_turned_off(unmarked):
    assert Project.load(unmarked / "train.py", detect=False).feature_names == ()


def test_variants_leave_git_status_clean(unmarked):
    subprocess.run(["git", "init", "-q", str(unmarked)], check=True)
    subprocess.run(["git", "-C", str(unmarked), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(unmarked), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"], check=True
    )
    from tfrepro.trials.state import StateDir

    p = Project.load(unmarked / "train.py")
    state = StateDir.of(p.root)
    state.ensure()
    p.write_variant((), state.path / "trials" / "v")
    st = subprocess.run(["git", "-C", str(unmarked), "status", "--porcelain"], capture_output=True, text=True)
    assert st.stdout == ""
