"""Check 7, the training loop (check/run.py): the step as written against
fit, with the ranks the probes recorded. Pure: no TensorFlow."""

from __future__ import annotations

from tfrepro.check.checklist import CheckStatus
from tfrepro.check.run import check_loop
from tfrepro.trials.values import TrialResult

STEP = """\
import tensorflow as tf
import keras

model = keras.Sequential([keras.Input((4,)), keras.layers.{layer}(), keras.layers.Dense(1)])


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        pred = model(xb{training})
        loss = {loss}
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def shapes(labels, out_rank) -> TrialResult:
    return TrialResult(
        extra={
            "check.batches": {"batches": [{"inputs": [{"shape": [8, 4]}], "labels": [{"shape": labels}]}]},
            "check.model": {"output_rank": out_rank},
        }
    )


def judged(result=None, layer="Dropout", training=", training=True", loss="loss_fn(yb, pred)", extra=""):
    text = STEP.format(layer=layer, training=training, loss=loss) + extra
    return check_loop([("train.py", text)], result)


def test_a_correct_step_passes():
    item = judged(shapes([8], 2))
    assert item.status is CheckStatus.PASS and item.number == 7


def test_no_training_true_with_dropout_or_batchnorm_warns():
    for layer in ("Dropout", "BatchNormalization"):
        item = judged(layer=layer, training="")
        assert item.status is CheckStatus.WARN and "without training=True" in item.summary
        assert "training=True" in item.fix
    assert judged(layer="ReLU", training="").status is CheckStatus.PASS  # nothing that depends on the mode


def test_labels_and_predictions_of_different_rank_in_a_hand_written_loss_warn():
    hand = "tf.reduce_mean(tf.square(yb - pred))"
    item = judged(shapes([8], 2), loss=hand)
    assert item.status is CheckStatus.WARN and "rank 1 against predictions of rank 2" in item.summary
    assert judged(shapes([8, 1], 2), loss=hand).status is CheckStatus.PASS
    assert judged(shapes([8], 2)).status is CheckStatus.PASS  # a loss object squeezes the ranks itself


def test_a_per_replica_loss_over_the_local_batch_warns():
    run = "\ndef dist(x, y):\n    return strategy.run(train_step, args=(x, y))\n"
    item = judged(extra=run)
    assert item.status is CheckStatus.WARN and "replica's own batch" in item.summary
    good = judged(loss="tf.nn.compute_average_loss(loss_fn(yb, pred), global_batch_size=GB)", extra=run)
    assert good.status is CheckStatus.PASS


def test_a_script_without_a_tape_step_gets_no_item():
    assert check_loop([("train.py", "import keras\nmodel.fit(x, y)\n")], None) is None


def test_check_runs_a_loop_as_written_and_the_rest_as_the_baseline(tmp_path):
    # `tfrepro check` on a loop script judges the loop the user runs, not the fit that stands in for it.
    from tfrepro.check.run import checked_features
    from tfrepro.project import Project

    loop = STEP.format(layer="Dropout", training=", training=True", loss="loss_fn(yb, pred)")
    text = loop.replace("import keras\n", "import keras\n\nds = tf.data.Dataset.range(4).shuffle(4)\n")
    (tmp_path / "train.py").write_text(text + "\n\nfor xb, yb in ds:\n    train_step(xb, yb)\n")
    project = Project.load(tmp_path / "train.py")
    assert {"custom_loop", "shuffle", "tf_function"} <= set(project.feature_names)
    assert checked_features(project) == {"custom_loop"}
    assert checked_features(project, all_=True) == set(project.feature_names)
    assert checked_features(project, ["shuffle"]) == {"shuffle"}


def test_a_loss_is_judged_by_the_rule_the_loops_fit_uses():
    # One rule for `fn(labels, pred)` (annotate/loops.py `loss_call`), read by check 7 and by
    # the loop's fit stand-in. An elementwise op of the two broadcasts (B,) against (B, 1): check
    # 7 once took `tf.math.squared_difference(yb, pred)` for a loss object (only four op names
    # were hand-written to it), while the fit stand-in compiled `tf.square(yb, pred)` as a loss.
    from tfrepro.annotate.loops import step_facts
    from tfrepro.annotate.source import Src

    for loss in ("tf.math.squared_difference(yb, pred)", "tf.subtract(yb, pred)", "tf.square(yb, pred)"):
        item = judged(shapes([8], 2), loss=loss)
        assert item.status is CheckStatus.WARN and "rank 1 against predictions of rank 2" in item.summary, loss
    for loss in ("loss_fn(yb, pred)", "loss_fn(yb, y_pred=pred)", "loss_fn(tf.one_hot(yb, 4), pred)"):
        assert judged(shapes([8], 2), loss=loss).status is CheckStatus.PASS, loss
    text = STEP.format(layer="ReLU", training="", loss="loss_fn(*yb, pred)")
    assert not step_facts(Src(text, "train.py"))[0].loss_object  # a starred label: no loss call either
