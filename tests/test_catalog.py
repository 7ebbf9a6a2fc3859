"""The one feature catalog: templates and annotate agree with it (no TensorFlow)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tfrepro import catalog
from tfrepro import features as fb
from tfrepro.annotate import annotate, annotate_text

TEMPLATES = Path(catalog.__file__).parent / "templates"
SCRIPTS = Path(__file__).parent / "scripts_annotate"
_MARKER = re.compile(r"^\s*#\s*tfrepro:\s*feature\s+([a-z][a-z0-9_]*)", re.M)


def template_features() -> set[str]:
    names: set[str] = set()
    for p in TEMPLATES.rglob("*.jinja"):
        names.update(_MARKER.findall(p.read_text(encoding="utf-8")))
    return names


def template_affects_loss() -> set[str]:
    """The names the template's tfrepro.toml declares affects_loss = true
    (the Jinja list of (name, why) pairs it loops over)."""
    text = (TEMPLATES / "_shared" / "project" / "tfrepro.toml.jinja").read_text(encoding="utf-8")
    loop = text[text.index("{%- for name, why in [") : text.index("] if name in features %}")]
    return set(re.findall(r'\(\s*"([a-z0-9_]+)"\s*,', loop))


def test_every_template_feature_is_a_catalog_entry_by_its_own_name():
    names = template_features()
    assert {"mixed_precision", "shuffle", "lr_warmup", "callbacks"} <= names
    for n in names:
        e = catalog.get(n)
        assert e is not None and e.name == n, n


def test_template_manifest_declares_exactly_the_catalog_affects_loss_features():
    names = template_features()
    assert template_affects_loss() == {n for n in names if catalog.affects_loss(n)}


@pytest.mark.parametrize(
    "name",
    [
        "shuffle",
        "interleave",
        "parallel_reads",
        "nondeterministic_data",
        "random_augmentation",
        "lr_schedule",
        "lr_warmup",
        "callback_lr_scheduler",
        "callback_reduce_lr_on_plateau",
        "callbacks",
        "class_weight",
        "sample_weight",
        "regularizer",
        "label_smoothing",
        "gradient_clipping",
        "custom_layer_my_norm",  # its OFF stand-in computes something else
        "callback_early_stopping_2",  # stopping callbacks change how many steps run
    ],
)
def test_the_features_that_change_the_math_on_purpose_affect_the_loss(name):
    assert catalog.affects_loss(name)


@pytest.mark.parametrize(
    "name",
    [
        "prefetch",
        "cache",
        "parallel_map",
        "parallel_batch",
        "mixed_precision",
        "mirrored_strategy",
        "jit_compile",
        "xla",
        "tf_function",
        "callback_csv_logger",
        "custom_loop",
    ],
)
def test_the_same_math_features_do_not(name):
    assert not catalog.affects_loss(name)


def test_lookup_strips_suffixes_and_knows_families_and_lr_callbacks_by_name():
    assert catalog.get("callback_lr_scheduler_2").name == "callback_lr_scheduler"
    assert catalog.get("custom_layer_rms_norm").name == "custom_layer"
    assert catalog.get("nope") is None and not catalog.affects_loss("nope")
    assert catalog.affects_loss("callback_warmup")
    assert catalog.callback_entry("LinearWarmUp", "callback_linear_warm_up").affects_loss
    assert not catalog.callback_entry("CSVLogger", "callback_csv_logger").affects_loss


def test_annotate_takes_every_found_feature_from_the_catalog():
    result = annotate(sorted(SCRIPTS.glob("*.py")))
    assert result.found
    for f in result.found:
        e = catalog.get(f.name)
        assert e is not None, f.name
        assert f.affects_loss == catalog.affects_loss(f.name), f.name
        assert f.kind == e.kind, f.name


def test_annotate_marks_shuffle_affects_loss_and_writes_it_to_the_manifest(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""\
        import tensorflow as tf
        ds = tf.data.Dataset.range(10).shuffle(10).batch(2).prefetch(1)
        if __name__ == "__main__":
            pass
    """)
    )
    result = annotate([script])
    assert {f.name: f.affects_loss for f in result.found} == {"shuffle": True, "prefetch": False}
    assert "[features.shuffle]\naffects_loss = true" in (result.manifest.annotated if result.manifest else "")
    assert "prefetch" not in (result.manifest.annotated if result.manifest else "")


KEYWORDS = """\
import tensorflow as tf
from tensorflow import keras
inputs = keras.Input((4,))
x = keras.layers.RandomFlip("horizontal")(inputs)
x = keras.layers.Dense(3, kernel_regularizer=keras.regularizers.l2(1e-4))(x)
model = keras.Model(inputs, x)
loss = keras.losses.CategoricalCrossentropy(label_smoothing=0.1)
opt = keras.optimizers.Adam(1e-3, clipnorm=1.0)
model.compile(opt, loss)
model.fit(xs, ys, class_weight={0: 1.0, 1: 2.0})
"""


def test_objective_keywords_and_random_layers_are_features_with_a_neutral_off_part():
    text, found, skipped = annotate_text(KEYWORDS, "train.py")
    by = {f.name: f for f in found}
    assert set(by) == {"random_augmentation", "regularizer", "label_smoothing", "gradient_clipping", "class_weight"}, (
        skipped
    )
    assert all(f.affects_loss for f in found)
    off = fb.parse(text, "train.py").render(set())
    assert "keras.layers.Identity()(inputs)" in off
    assert "kernel_regularizer=None" in off and "label_smoothing=0.0" in off
    assert "clipnorm=None" in off and "class_weight=None" in off
    compile(off, "train.py", "exec")
    assert fb.parse(text, "train.py").render(None) == text  # written ON


def test_every_strategy_class_is_a_strategy_entry_or_no_feature():
    """catalog.STRATEGIES is what annotate marks and the report's setup names."""
    assert {catalog.kind_of(f) for f in catalog.STRATEGIES.values() if f is not None} == {"strategy"}
    assert [c for c, f in catalog.STRATEGIES.items() if f is None] == ["OneDeviceStrategy"]
