"""Check 7, the training loop (pure): what a hand-written GradientTape step
gets wrong against `fit` (DOMAIN.md, "custom training loop"), judged from the
step as written (annotate/loops.py's `step_facts`) and, where shapes are
needed, from what the probed trial recorded (the first batch's labels, the
model's output rank).

- the model called without `training=True` while it has Dropout or
  BatchNormalization (tensorflow/tensorflow#31184): those layers then run
  as at inference;
- labels and predictions of a hand-written loss of different rank
  (tensorflow/tensorflow#28901): `(B,)` against `(B, 1)` broadcasts to
  `(B, B)`; a Keras loss object brings them to the same rank, fit too;
- a per-replica loss under `strategy.run` averaged over the replica's batch
  instead of the global one (no `tf.nn.compute_average_loss`, no division by
  the global batch): with N replicas the summed gradients are N times fit's.

Scripts without a GradientTape step get no item.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable

from tfrepro.annotate.loops import StepFacts, step_facts
from tfrepro.annotate.source import Src
from tfrepro.check.checklist import CheckItem, CheckStatus
from tfrepro.check.data import item
from tfrepro.errors import UserError
from tfrepro.trials.values import TrialResult

_MODE_LAYERS = re.compile(r"\b(Dropout|SpatialDropout[123]D|GaussianDropout|AlphaDropout|BatchNormalization)\b")


def facts_of(texts: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, StepFacts]], bool]:
    """(path, step) for every GradientTape step in the texts, and whether they build Dropout/BatchNorm."""
    steps, mode_layers = [], False
    for path, text in texts:
        mode_layers = mode_layers or bool(_MODE_LAYERS.search(text))
        with contextlib.suppress(UserError):
            steps += [(path, f) for f in step_facts(Src(text, path))]
    return steps, mode_layers


def _ranks(result: TrialResult | None) -> tuple[int | None, int | None]:
    """(rank of the first batch's labels, rank of the model's output), when the probes recorded them."""
    if result is None:
        return None, None
    label_rank = None
    batches = (result.extra.get("check.batches") or {}).get("batches") or []
    if batches and batches[0].get("labels"):
        shape = batches[0]["labels"][0].get("shape")
        label_rank = len(shape) if shape is not None else None
    out = (result.extra.get("check.model") or {}).get("output_rank")
    return label_rank, out if isinstance(out, int) else None


def check_loop(steps: list[tuple[str, StepFacts]], mode_layers: bool, result: TrialResult | None) -> CheckItem | None:
    if not steps:
        return None
    warnings, fixes, evidence = [], [], []
    label_rank, out_rank = _ranks(result)
    for path, f in steps:
        where = f"{path}:{f.line}"
        evidence.append(f"{where}: loss {f.loss_code}")
        if mode_layers and f.training is not True:
            warnings.append(f"{where}: {f.model} is called without training=True, and it has Dropout/BatchNorm")
            fixes.append(f"call {f.model}(x, training=True) inside the tape")
        if not f.loss_object:
            if label_rank is not None and out_rank is not None and label_rank != out_rank:
                warnings.append(
                    f"{where}: labels of rank {label_rank} against predictions of rank {out_rank} in a "
                    "hand-written loss: they broadcast (e.g. (B,) - (B, 1) is (B, B))"
                )
                fixes.append("reshape the labels to the predictions' shape, or use a Keras loss object")
            elif label_rank is None or out_rank is None:
                evidence.append(f"{where}: ranks of labels and predictions not recorded (hand-written loss)")
        if f.per_replica and not f.global_average:
            warnings.append(
                f"{where}: the per-replica loss is averaged over the replica's own batch, not the global one"
            )
            fixes.append("use tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)")
    if warnings:
        summary = warnings[0] if len(warnings) == 1 else f"{len(warnings)} differences from fit"
        shown = warnings[1:] if len(warnings) == 1 else warnings
        return item("training_loop", CheckStatus.WARN, summary, shown + evidence, "; ".join(dict.fromkeys(fixes)))
    return item("training_loop", CheckStatus.PASS, "the step trains as fit would", evidence)
