"""`tfrepro annotate` without TensorFlow: recognisers, rewriting, safety.

Behaviour is checked by running code: tf.data chains are executed against a
recording fake dataset, so "the split chain computes the same pipeline" and
"OFF removes exactly that link" are facts, not string comparisons.
"""

from __future__ import annotations

import textwrap
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrepro import features as fb
from tfrepro.annotate import annotate, annotate_text, merge
from tfrepro.cli import main

SCRIPTS = Path(__file__).parent / "scripts_annotate"


def ann(code: str, **kw):
    text, found, skipped = annotate_text(textwrap.dedent(code), "train.py", **kw)
    return text, found, skipped


def names(found) -> set[str]:
    return {f.name for f in found}


# -- a recording fake for tf.data ---------------------------------------------


class FakeDS:
    def __init__(self, ops=()):
        self.ops = tuple(ops)

    def __getattr__(self, method):
        if method.startswith("_"):
            raise AttributeError(method)

        def link(*args, **kwargs):
            return FakeDS(self.ops + ((method, args, tuple(sorted(kwargs.items()))),))

        return link


class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


# `tf.data.Dataset.range(n)` starts a recorded pipeline.
FAKE_TF = _NS(data=_NS(Dataset=_NS(range=lambda n: FakeDS([("range", (n,), ())]))))


def run_pipeline(code: str):
    env = {"tf": FAKE_TF, "AUTOTUNE": -1, "f": "f", "g": "g"}
    exec(compile(code, "train.py", "exec"), env)
    return env["result"]().ops


CHAIN = """\
def make():
    ds = tf.data.Dataset.range(8).map(f, num_parallel_calls=AUTOTUNE).cache().shuffle(100, seed=1).batch(32)
    return ds.interleave(g, cycle_length=2, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
result = make
"""


def test_split_chain_computes_the_same_pipeline_and_each_off_part_drops_only_its_link():
    text, found, _ = ann(CHAIN)
    assert names(found) == {"parallel_map", "cache", "shuffle", "interleave", "prefetch"}
    assert run_pipeline(text) == run_pipeline(CHAIN)  # written ON: same behaviour
    parsed = fb.parse(text, "train.py")
    every = set(parsed.feature_names)
    ops = [m for m, _, _ in run_pipeline(CHAIN)]
    assert [m for m, _, _ in run_pipeline(parsed.render(every - {"cache"}))] == [m for m in ops if m != "cache"]
    assert [m for m, _, _ in run_pipeline(parsed.render(every - {"prefetch"}))] == ops[:-1]
    assert ops[0] == "range"
    off_map = run_pipeline(parsed.render(every - {"parallel_map"}))
    assert off_map[1] == ("map", ("f",), ())
    off_inter = run_pipeline(parsed.render(every - {"interleave"}))
    assert ("flat_map", ("g",), ()) in off_inter and not any(m == "interleave" for m, _, _ in off_inter)
    baseline = [m for m, _, _ in run_pipeline(parsed.render(set()))]
    assert baseline == ["range", "map", "batch", "flat_map"]


_LINKS = {
    "prefetch": "prefetch(AUTOTUNE)",
    "cache": "cache()",
    "shuffle": "shuffle(10)",
    "batch": "batch(4)",
    "repeat": "repeat()",
    "pmap": "map(f, num_parallel_calls=AUTOTUNE)",
    "map": "map(g)",
    "interleave": "interleave(g, cycle_length=2)",
}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(_LINKS)), min_size=1, max_size=7),
    st.sampled_from(["assign", "return", "rename", "parens"]),
)
def test_any_chain_is_split_without_changing_the_pipeline(links, form):
    chain = "tf.data.Dataset.range(8)" + "".join("." + _LINKS[x] for x in links)
    if form == "assign":
        body = f"    ds = {chain}\n    return ds\n"
    elif form == "return":
        body = f"    return {chain}\n"
    elif form == "rename":
        body = f"    raw = tf.data.Dataset.range(8)\n    train_ds = {chain.replace('tf.data.Dataset.range(8)', 'raw', 1)}\n    return train_ds\n"
    else:
        inner = "\n        ".join(["tf.data.Dataset.range(8)"] + ["." + _LINKS[x] for x in links])
        body = f"    ds = (\n        {inner}  # the pipeline\n    )\n    return ds\n"
    code = f"def make():\n{body}result = make\n"
    text, found, skipped = ann(code)
    assert not skipped
    assert run_pipeline(text) == run_pipeline(code)
    parsed = fb.parse(text, "train.py")
    assert parsed.render(set(parsed.feature_names)) == text
    for name in parsed.feature_names:  # every single feature OFF still runs
        run_pipeline(parsed.render(set(parsed.feature_names) - {name}))
    again, found2, _ = ann(text)
    assert again == text and not found2


# -- the other recognisers -----------------------------------------------------

SIMPLE = """\
import tensorflow as tf
import keras
from keras import layers


class ScaledDense(layers.Dense):
    pass


class LayerNorm(layers.Layer):
    def __init__(self, epsilon=1e-5, **kw):
        super().__init__(**kw)


class Mystery(keras.layers.Layer):
    pass


def cbs():
    return [keras.callbacks.TerminateOnNaN(), keras.callbacks.LearningRateScheduler(lambda e, lr: lr)]


@tf.function(jit_compile=True)
def step(x):
    return x


keras.mixed_precision.set_global_policy("mixed_float16")
tf.config.run_functions_eagerly(True)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential([ScaledDense(4, activation="relu"), layers.Dense(1)])
    norm = LayerNorm(epsilon=1e-3)
    odd = Mystery()
    model.compile("adam", "mse", jit_compile=True)
model.fit(None, callbacks=cbs())
"""


def test_single_statement_features_and_their_off_parts():
    text, found, skipped = ann(SIMPLE)
    assert names(found) == {
        "mixed_precision",
        "eager_debug",
        "mirrored_strategy",
        "jit_compile",
        "custom_layer_scaled_dense",
        "custom_layer_layer_norm",
        "custom_layer_mystery",
        "callback_terminate_on_nan",
        "callback_lr_scheduler",
    }
    assert not skipped
    parsed = fb.parse(text, "train.py")
    off = parsed.render(set())
    assert "\nstrategy = tf.distribute.get_strategy()\n" in off
    assert "@tf.function(jit_compile=False)\ndef step" in off.replace("# tfrepro: end\n", "")
    assert 'model = keras.Sequential([layers.Dense(4, activation="relu"), layers.Dense(1)])' in off
    assert "norm = layers.LayerNormalization(epsilon=1e-3)" in off
    assert "odd = layers.Identity()" in off
    assert 'model.compile("adam", "mse", jit_compile=False)' in off
    notes = {f.name: f.note for f in found}
    assert notes["custom_layer_mystery"] and "Identity" in notes["custom_layer_mystery"]
    assert notes["custom_layer_scaled_dense"] is None
    lr = [f for f in found if f.name == "callback_lr_scheduler"]
    assert lr and lr[0].affects_loss
    # every state compiles; the live text is the original code
    for name in parsed.feature_names:
        compile(parsed.render(set(parsed.feature_names) - {name}), "t", "exec")
    assert parsed.render(set(parsed.feature_names), export=True).replace("\n", "").count("set_global_policy") == 1


def test_the_annotated_file_holds_the_original_statements_live():
    text, _, _ = ann(SIMPLE)
    exported = fb.parse(text, "t").render(None, export=True).splitlines()
    # Every original line is live as written, except the returned callbacks
    # list, rebuilt with appends (the same list, in the same order).
    rebuilt = "    return [keras.callbacks.TerminateOnNaN(), keras.callbacks.LearningRateScheduler(lambda e, lr: lr)]"
    assert [x for x in SIMPLE.splitlines() if x != rebuilt] == [x for x in exported if x in SIMPLE.splitlines()]
    i = exported.index("def cbs():")
    assert exported[i + 1 : i + 5] == [
        "    callbacks = []",
        "    callbacks.append(keras.callbacks.TerminateOnNaN())",
        "    callbacks.append(keras.callbacks.LearningRateScheduler(lambda e, lr: lr))",
        "    return callbacks",
    ]


UNSAFE = """\
import tensorflow as tf

ds = tf.data.Dataset.range(8)
model.fit(ds.shuffle(8).prefetch(2), epochs=1)
x = 1; tf.config.run_functions_eagerly(True)
if debug: tf.config.run_functions_eagerly(True)
with tf.distribute.MirroredStrategy().scope():
    pass
model.fit(ds, callbacks=[*extra, tf.keras.callbacks.TerminateOnNaN()])
model.fit(ds, callbacks=make_callbacks())
"""


def test_what_cannot_be_split_is_reported_with_its_line_and_left_alone():
    text, found, skipped = ann(UNSAFE)
    assert text == UNSAFE and not found
    lines = {s.line for s in skipped}
    assert {4, 5, 6, 7, 9, 10} <= lines
    assert any("inside an expression" in s.reason for s in skipped if s.line == 4)


def test_only_limits_the_features_marked():
    text, found, _ = ann(CHAIN, only=["prefetch", "callback"])
    assert names(found) == {"prefetch"}
    assert run_pipeline(text) == run_pipeline(CHAIN)


def test_a_feature_alone_in_its_suite_gets_pass_as_off_part():
    code = "import tensorflow as tf\nfor gpu in gpus:\n    tf.config.experimental.set_memory_growth(gpu, True)\n"
    text, found, _ = ann(code)
    assert names(found) == {"memory_growth"}
    compile(fb.parse(text, "t").render(set()), "t", "exec")
    assert "    # pass\n" in text


# -- the five realistic scripts --------------------------------------------------


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_realistic_scripts_round_trip_and_are_idempotent(script):
    original = (SCRIPTS / script).read_text()
    text, found, skipped = annotate_text(original, script)
    assert found and text != original
    parsed = fb.parse(text, script)
    every = set(parsed.feature_names)
    assert all(b.state for b in parsed.blocks)  # written ON
    assert parsed.render(every) == text
    off = parsed.set_states({n: False for n in every})
    compile(off, script, "exec")
    assert fb.parse(off, script).set_states({n: True for n in every}) == text  # byte for byte back
    again, found2, skipped2 = annotate_text(text, script)
    assert again == text and not found2
    assert sorted(s.reason for s in skipped2) == sorted(s.reason for s in skipped)


# -- manifest ------------------------------------------------------------------


def test_manifest_is_created_with_the_entry_and_merged_without_losing_anything():
    new, problems = merge(None, ["lr_schedule"], "train.py")
    data = tomllib.loads(new)
    assert data["trial"]["entry"] == "train.py" and data["features"]["lr_schedule"]["affects_loss"] is True
    existing = "# mine\n[trial]\nsteps = 20  # keep\n\n[features.lr_schedule]\n# why\n\n[symptoms]\nnan = true\n"
    merged, problems = merge(existing, ["lr_schedule", "callback_lr_scheduler"], "train.py")
    assert not problems
    assert merged.startswith('# mine\n[trial]\nentry = "train.py"\nsteps = 20  # keep\n') and "# why" in merged
    d = tomllib.loads(merged)
    assert d["trial"] == {"steps": 20, "entry": "train.py"} and d["symptoms"] == {"nan": True}
    assert d["features"]["lr_schedule"] == {"affects_loss": True}
    assert d["features"]["callback_lr_scheduler"] == {"affects_loss": True}
    assert merge(merged, ["lr_schedule"], None) == (None, [])
    same, problems = merge("[features.lr_schedule]\naffects_loss = false\n", ["lr_schedule"], None)
    assert same is None and "false" in problems[0].lower()
    with_entry, problems = merge("[symptoms]\nnan = true\n", [], "train.py")
    assert tomllib.loads(with_entry) == {"trial": {"entry": "train.py"}, "symptoms": {"nan": True}}
    assert merge('[trial]\ncommand = ["python", "t.py"]\n', [], "train.py") == (None, [])
    broken, problems = merge("[features\n", ["lr_schedule"], None)
    assert broken is None and "not valid TOML" in problems[0]
    inline, problems = merge("features = { lr_schedule = { } }\n", ["lr_schedule"], None)
    assert inline is None and "by hand" in problems[0]


# -- CLI -------------------------------------------------------------------------


def test_cli_prints_a_diff_and_changes_nothing_without_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(CHAIN)
    r = CliRunner().invoke(main, ["annotate", "train.py"])
    assert r.exit_code == 0, r.output
    assert "+++ b/train.py" in r.stdout and "+    # tfrepro: feature prefetch" in r.stdout
    assert (tmp_path / "train.py").read_text() == CHAIN
    assert "would mark 5 features" in r.stderr


def test_cli_write_edits_files_and_writes_the_manifest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = (SCRIPTS / "tf_keras_names.py").read_text()
    (tmp_path / "train.py").write_text(src)
    r = CliRunner().invoke(main, ["annotate", "--write", "train.py"])
    assert r.exit_code == 0, r.output
    from tfrepro.project import Project

    project = Project.load(tmp_path)  # the manifest names the entry and validates
    assert project.manifest.trial.entry == "train.py"
    assert project.affects_loss == {"lr_schedule", "callback_reduce_lr_on_plateau", "shuffle", "custom_layer_linear"}
    r2 = CliRunner().invoke(main, ["annotate", "--write", "train.py"])
    assert r2.exit_code == 0 and "marked 0 features" in r2.stderr
    assert "wrote" not in r2.stdout


def test_cli_syntax_error_is_exit_2_with_file_and_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import tensorflow as tf\n\nds = (tf.data\n")
    r = CliRunner().invoke(main, ["annotate", "train.py"])
    assert r.exit_code == 2
    assert "train.py:3" in r.stderr and "not valid Python" in r.stderr


def test_cli_bad_existing_markers_are_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("# tfrepro: feature x\nprint(1)\n")
    r = CliRunner().invoke(main, ["annotate", "train.py"])
    assert r.exit_code == 2 and "train.py:1" in r.stderr


def test_cli_missing_file_is_exit_2(tmp_path):
    r = CliRunner().invoke(main, ["annotate", str(tmp_path / "nope.py")])
    assert r.exit_code == 2


SEQUENTIAL = """\
from keras import layers
import keras


class Norm(layers.Layer):
    pass


class Wide(layers.Dense):
    pass


def build():
    return keras.Sequential([
        layers.Dense(8),
        Norm(),  # the team's norm
        Wide(4, activation="relu"),
    ], name="net")
"""


def _fake_keras():
    made = []

    class Layer:
        def __init__(self, *args, **kwargs):
            self.spec = (type(self).__name__, args, tuple(sorted(kwargs.items())))
            made.append(self.spec)

    class Dense(Layer):
        pass

    class Identity(Layer):
        pass

    def Sequential(layer_list, name=None):
        return [x.spec for x in layer_list], name

    layers = _NS(Layer=Layer, Dense=Dense, Identity=Identity)
    return _NS(layers=layers, Sequential=Sequential), layers, made


def _build(code: str):
    keras, layers, made = _fake_keras()
    env = {"__name__": "m"}
    code = code.replace("from keras import layers\nimport keras\n", "")
    env.update(keras=keras, layers=layers)
    exec(compile(code, "m.py", "exec"), env)
    return env["build"](), made


def test_several_custom_layers_in_one_sequential_get_a_block_each():
    text, found, skipped = ann(SEQUENTIAL)
    assert names(found) == {"custom_layer_norm", "custom_layer_wide"} and not skipped
    assert _build(text) == _build(SEQUENTIAL)  # same layers, same order, same model
    parsed = fb.parse(text, "t")
    (specs, name), _ = _build(parsed.render({"custom_layer_wide"}))
    assert name == "net"
    assert [s[0] for s in specs] == ["Dense", "Identity", "Wide"]
    (specs, _), _ = _build(parsed.render(set()))
    assert specs[2] == ("Dense", (4,), (("activation", "relu"),))
    assert "    # the team's norm\n" in text


def test_layer_classes_from_sibling_files_count_as_the_projects(tmp_path):
    (tmp_path / "blocks.py").write_text(
        "import tensorflow as tf\n\nclass GatedUnit(tf.keras.layers.Layer):\n    pass\n"
    )
    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nfrom blocks import GatedUnit\n\nx = GatedUnit()(inp)\n"
    )
    result = annotate([tmp_path / "train.py"])
    assert [f.name for f in result.found] == ["custom_layer_gated_unit"]
    assert "# x = tf.keras.layers.Identity()(inp)" in result.files[0].annotated
    # the layer's stand-in computes something else: it affects the loss by construction
    assert tomllib.loads(result.manifest.annotated) == {
        "trial": {"entry": "train.py"},
        "features": {"custom_layer_gated_unit": {"affects_loss": True}},
    }


def test_each_script_sees_its_own_layer_class_before_a_siblings_of_the_same_name(tmp_path):
    (tmp_path / "a.py").write_text(
        "import tensorflow as tf\n\nclass Norm(tf.keras.layers.Dense):\n    pass\n\nx = Norm(4)(inp)\n"
    )
    (tmp_path / "b.py").write_text(
        "import tensorflow as tf\n\nclass Norm(tf.keras.layers.Layer):\n"
        "    def __init__(self, k):\n        super().__init__()\n\ny = Norm(4)(inp)\n"
    )
    result = annotate([tmp_path / "a.py", tmp_path / "b.py"])
    a, b = (r.annotated for r in result.files)
    assert "# x = tf.keras.layers.Dense(4)(inp)" in a  # a.py's Norm: a stock Dense
    assert "# y = tf.keras.layers.Identity()(inp)" in b  # b.py's Norm: no stock equivalent


def test_tf_function_decorators_and_rewraps_switch_together():
    code = (
        "import tensorflow as tf\n\n\n@tf.function\ndef train_step(x):\n    return x\n\n\n"
        "def step(x):\n    return x\n\n\nstep = tf.function(step)\nother = tf.function(step)\n"
    )
    text, found, _ = ann(code)
    assert [(f.name, f.line) for f in found] == [("tf_function", 4), ("tf_function", 13)]
    off = fb.parse(text, "t").render(set(), export=True)
    assert "@tf.function" not in off and "step = tf.function(step)" not in off
    assert "other = tf.function(step)" in off
    compile(off, "t", "exec")


def test_crlf_files_stay_crlf():
    code = "import tensorflow as tf\r\nds = tf.data.Dataset.range(4)\r\nds = ds.cache().prefetch(2)\r\n"
    text, found, _ = annotate_text(code, "t.py")
    assert names(found) == {"cache", "prefetch"}
    assert text.count("\n") == text.count("\r\n") > 3
    assert fb.parse(text, "t").render({"cache", "prefetch"}) == text


def test_cli_write_keeps_crlf_on_disk(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(b"import tensorflow as tf\r\nds = tf.data.Dataset.range(4).prefetch(2)\r\n")
    assert CliRunner().invoke(main, ["annotate", "--write", "train.py"]).exit_code == 0
    data = (tmp_path / "train.py").read_bytes()
    assert b"# tfrepro: feature prefetch" in data and data.count(b"\n") == data.count(b"\r\n")


def test_cli_reports_what_it_left_alone_and_unknown_only_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(UNSAFE)
    (tmp_path / "tfrepro.toml").write_text("[features.lr_schedule]\naffects_loss = false\n")
    r = CliRunner().invoke(main, ["annotate", "--only", "prefetch,nonesuch", "train.py"])
    assert r.exit_code == 0
    assert r.stdout == ""  # nothing to change
    assert "left alone: train.py:4: tf.data prefetch, shuffle inside an expression" in r.stderr
    assert "--only: nothing found for prefetch, nonesuch" in r.stderr
    assert "would mark 0 features" in r.stderr


def test_cli_reports_a_manifest_it_will_not_touch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(
        "import keras\nlr = keras.optimizers.schedules.CosineDecay(0.1, decay_steps=10)\n"
    )
    manifest = '[trial]\nentry = "train.py"\n\n[features.lr_schedule]\naffects_loss = false\n'
    (tmp_path / "tfrepro.toml").write_text(manifest)
    r = CliRunner().invoke(main, ["annotate", "--write", "train.py"])
    assert r.exit_code == 0
    assert "manifest: tfrepro.toml says affects_loss = False for lr_schedule" in r.stderr
    assert (tmp_path / "tfrepro.toml").read_text() == manifest
    assert "# tfrepro: feature lr_schedule" in (tmp_path / "train.py").read_text()


def test_input_options_and_experimental_strategies():
    code = (
        "import tensorflow as tf\n"
        "opts = tf.data.Options()\n"
        "opts.experimental_deterministic = False\n"
        "ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)\n"
        "strategy = tf.distribute.experimental.TPUStrategy(tpu)\n"
    )
    text, found, _ = ann(code)
    assert names(found) == {"nondeterministic_data", "parallel_reads", "tpu_strategy"}
    off = fb.parse(text, "t").render(set(), export=True)
    assert "experimental_deterministic" not in off
    assert "ds = tf.data.TFRecordDataset(files, num_parallel_reads=None)" in off
    assert "strategy = tf.distribute.get_strategy()" in off


def test_custom_layers_without_a_safe_stand_in_are_reported():
    code = (
        "import keras\nfrom keras import layers\n\n\n"
        "class CTCLayer(layers.Layer):\n    def call(self, y_true, y_pred):\n"
        "        self.add_loss(1.0)\n        return y_pred\n\n\n"
        "class Merge(layers.Layer):\n    def call(self, a, b):\n        return a + b\n\n\n"
        "out = CTCLayer(name='ctc')(labels, x)\ny = Merge()(a, b)\n"
    )
    text, found, skipped = ann(code)
    assert text == code and not found
    assert {s.line for s in skipped} == {16, 17}
    assert any("add_loss" in s.reason for s in skipped)


def test_a_chain_that_needs_no_split_keeps_its_comments_once():
    code = "ds = tf.data.Dataset.range(4)\nds = ds.prefetch(2)  # overlap\nds = (ds  # src\n      .cache())  # keep\n"
    text, found, _ = ann(code)
    assert names(found) == {"prefetch", "cache"}
    for c in ("# overlap", "# src", "# keep"):
        assert text.count(c) == 1


def test_an_annotated_assignment_is_an_assignment_to_every_recogniser():
    # One rule (source.assigned_name): `x: T = ...` binds x as `x = ...` does, for the
    # tf.data names, a Lambda's name and a loop's loss as it already did for callbacks.
    code = """\
        import tensorflow as tf
        import keras

        train: tf.data.Dataset = tf.data.Dataset.range(8)
        train = train.map(f, num_parallel_calls=4)
        scale: keras.layers.Layer = keras.layers.Lambda(lambda t: t * 2)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.MeanSquaredError()
        for xb, yb in train:
            with tf.GradientTape() as tape:
                pred = model(xb, training=True)
                loss: tf.Tensor = loss_fn(yb, pred)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """
    _, found, skipped = ann(code)
    assert {"parallel_map", "custom_layer_scale", "custom_loop"} <= names(found), skipped
