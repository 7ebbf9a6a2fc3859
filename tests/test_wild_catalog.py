"""Issue 26: mismatch only where the math must not change, and one feature
per callback class (annotate/rebuild.py, catalog.py)."""

from __future__ import annotations

import textwrap

from tfrepro import catalog
from tfrepro import features as fb
from tfrepro.annotate import annotate_text

CALLBACKS = textwrap.dedent(
    """\
    import keras


    class SlowBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass


    class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = True


    class Watcher(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if logs["loss"] < 0.1:
                self.model.stop_training = True


    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(None, callbacks=[SlowBatch()])
    model.fit(None, callbacks=[SlowBatch(), EarlyStoppingAtMinLoss()])
    model.fit(None, callbacks=[SlowBatch(), Watcher()])
    """
)


def test_one_feature_per_callback_class_switched_together_in_every_fit():
    text, found, _ = annotate_text(CALLBACKS, "train.py")
    names = {f.name for f in found}
    assert names == {"callback_slow_batch", "callback_early_stopping_at_min_loss", "callback_watcher"}
    parsed = fb.parse(text, "train.py")
    slow = [b for b in parsed.blocks if b.name == "callback_slow_batch"]
    assert len(slow) == 3  # one block in each fit, one name
    live = [ln for ln in parsed.render(["callback_watcher"]).splitlines() if not ln.lstrip().startswith("#")]
    assert not any("SlowBatch()" in ln for ln in live)
    assert (
        sum(
            "SlowBatch()" in ln
            for ln in parsed.render(["callback_slow_batch"]).splitlines()
            if not ln.lstrip().startswith("#")
        )
        == 3
    )


def test_stopping_callbacks_affect_the_loss_by_what_they_do_or_their_name():
    found = {f.name: f.affects_loss for f in annotate_text(CALLBACKS, "train.py")[1]}
    assert found == {
        "callback_slow_batch": False,
        "callback_early_stopping_at_min_loss": True,
        "callback_watcher": True,  # sets model.stop_training: known from its body, not its name
    }
    assert catalog.affects_loss("callback_early_stopping")
    assert catalog.affects_loss("callback_early_stopping_2")


def test_a_custom_layer_stand_in_computes_something_else_so_it_affects_the_loss():
    assert catalog.affects_loss("custom_layer_log_money")
    # the features whose OFF form promises the same computation stay candidates
    for name in ("mixed_precision", "mirrored_strategy", "jit_compile", "prefetch", "cache", "custom_loop"):
        assert not catalog.affects_loss(name), name
