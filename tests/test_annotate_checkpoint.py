"""A checkpoint callback with a batch schedule is switched by its schedule
(annotate/rebuild.py): OFF, the same callback at `save_freq="epoch"`, so the
script's later code that reads the checkpoints back still runs. Checked by
running every rendering against a recording fake Keras."""

from __future__ import annotations

import textwrap
import types

from tfrepro import features as fb
from tfrepro.annotate import annotate_text


def ann(code: str):
    return annotate_text(textwrap.dedent(code), "train.py")


class _Cb:
    def __init__(self, *args, **kw):
        self.args, self.kw = args, kw


def run(text: str) -> list[list[tuple[str, dict]]]:
    """The callbacks each `fit` got: (class, keyword arguments); the imports
    are left out (the fake stands in for Keras)."""
    fits: list[list[tuple[str, dict]]] = []

    class Model:
        def fit(self, *a, callbacks=(), **kw):
            fits.append([(type(c).__name__, dict(c.kw)) for c in callbacks])

    callbacks = types.SimpleNamespace(
        ModelCheckpoint=type("ModelCheckpoint", (_Cb,), {}),
        BackupAndRestore=type("BackupAndRestore", (_Cb,), {}),
        TerminateOnNaN=type("TerminateOnNaN", (_Cb,), {}),
    )
    keras = types.SimpleNamespace(callbacks=callbacks)
    code = "".join(ln for ln in text.splitlines(True) if not ln.startswith(("import ", "from ")))
    exec(compile(code, "train.py", "exec"), {"keras": keras, "model": Model(), "batch_size": 32})
    return fits


# The TensorFlow save-and-load tutorial's shape: one variable, a first fit
# saving each epoch, the script reading the files back, then a second fit with
# the variable rebuilt to save every few batches.
TUTORIAL = """\
import tensorflow as tf
from tensorflow import keras

cp_callback = keras.callbacks.ModelCheckpoint(filepath="training_1/cp.weights.h5", save_weights_only=True)
model.fit(None, epochs=2, callbacks=[cp_callback])
cp_callback = keras.callbacks.ModelCheckpoint(
    filepath="training_2/cp-{epoch:04d}.weights.h5", save_weights_only=True, save_freq=5 * batch_size
)
model.fit(None, epochs=3, callbacks=[cp_callback])
"""


def test_a_batch_scheduled_checkpoint_keeps_saving_off_at_its_default_schedule():
    text, found, skipped = ann(TUTORIAL)
    assert {f.name for f in found} == {"callback_model_checkpoint"} and not skipped
    parsed = fb.parse(text, "train.py")
    on, off = run(parsed.render({"callback_model_checkpoint"})), run(parsed.render(set()))
    assert on == run(TUTORIAL)
    # OFF: both fits still get their checkpoint (the files the script reads
    # back exist), and none saves per batch.
    assert [[c for c, _ in fit] for fit in off] == [["ModelCheckpoint"], ["ModelCheckpoint"]]
    assert off[0] == on[0]
    assert off[1][0][1] == {**on[1][0][1], "save_freq": "epoch"}
    assert on[1][0][1]["save_freq"] == 160


def test_an_inline_batch_scheduled_checkpoint_and_its_neighbours():
    code = """\
    from tensorflow import keras
    model.fit(None, callbacks=[keras.callbacks.BackupAndRestore("bk", 10), keras.callbacks.TerminateOnNaN()])
    """
    text, found, _ = ann(code)
    assert {f.name for f in found} == {"callback_backup_and_restore", "callback_terminate_on_nan"}
    parsed = fb.parse(text, "train.py")
    assert run(parsed.render(set())) == [[("BackupAndRestore", {})]]
    assert 'keras.callbacks.BackupAndRestore("bk", "epoch")' in parsed.render(set())
    assert run(parsed.render({"callback_terminate_on_nan"})) == [[("BackupAndRestore", {}), ("TerminateOnNaN", {})]]


def test_a_checkpoint_without_a_batch_schedule_is_still_removed():
    for freq in ("", ', save_freq="epoch"'):
        code = f"""\
        from tensorflow import keras
        cp = keras.callbacks.ModelCheckpoint("w-{{val_loss:.3f}}.weights.h5"{freq})
        model.fit(None, callbacks=[cp])
        """
        text, found, _ = ann(code)
        assert {f.name for f in found} == {"callback_model_checkpoint"}
        assert run(fb.parse(text, "train.py").render(set())) == [[]]
