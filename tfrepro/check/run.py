"""`tfrepro check` (the edge): one probed trial of a configuration → CheckReport.

All probes run in ONE trial through the ordinary trial machinery (variant,
fresh process, harness, cache); the probe plugin records facts and the pure
`tfrepro.check.judge.judge` turns them into the checklist. `run_checks` is also
what `tfrepro bisect` calls when the baseline itself fails, so that
`baseline-fails` comes with a reason. Check 7 (the training loop, judged on
the script's text) is at the end.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from tfrepro import catalog
from tfrepro.check.data import item
from tfrepro.check.judge import CheckItem, CheckOptions, CheckReport, CheckStatus, judge
from tfrepro.errors import UserError
from tfrepro.inside import PROBES
from tfrepro.settings import TrialSettings
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult

if TYPE_CHECKING:
    from tfrepro.project import Project


def checked_features(project: "Project", with_: Iterable[str] | None = None, all_: bool = False) -> frozenset[str]:
    """The configuration `tfrepro check` runs: exactly `with_` when given,
    every feature with `all_`, else the baseline with the training loop as
    written: every feature OFF but the hand-written loop's (catalog kind
    `loop`: custom_loop, gradient accumulation), whose OFF form is the fit
    that stands in for it. The checks judge the loop the user runs."""
    if with_ is not None:
        return project.check_names(with_)
    return frozenset(n for n in project.feature_names if all_ or catalog.kind_of(n) == "loop")


def run_checks(
    project: "Project",
    enabled: Iterable[str] = (),
    settings: TrialSettings | None = None,
    *,
    options: CheckOptions = CheckOptions(),
    expect_gpu: bool | None = None,
    how: TrialOptions = TrialOptions(),
    runner: Callable[..., TrialResult] | None = None,
) -> CheckReport:
    """Run `project` with `enabled` ON (the baseline by default) under the
    probes and judge the six sanity checks.

    `expect_gpu`: None decides in the trial process (CUDA_VISIBLE_DEVICES,
    /dev/nvidia0, nvidia-smi); True/False says so. The trial is cached like
    any other (its key includes the probe file and its options); `how` gives
    its cache use, state dir and environment. `runner` stands in for
    `trial.run_trial` (bisect passes its own).
    """
    if runner is None:
        from tfrepro.trials.runner import run_trial as runner

    settings = settings if settings is not None else project.manifest.trial
    # One run, no repeats: the checks judge a single trial (timings inside it
    # take the least disturbed of several measurements on their own).
    # The probes and the helpers they load enter the key through inside.digest().
    probed = replace(how, label="check", plugins=(PROBES,), plugin_options={"expect_gpu": expect_gpu})
    result = runner(project, enabled, replace(settings, repeat=0), how=probed)
    report = judge(result, options, project=str(project.root))
    # Check 7 (below) for a script with a GradientTape step: its entry scripts as written.
    from tfrepro.annotate import entry_scripts

    trial = project.manifest.trial
    texts = []
    for rel in entry_scripts(trial.entry, trial.command, project.files):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            texts.append((rel, (project.root / rel).read_text(encoding="utf-8")))
    loop = check_loop(texts, result)
    return report if loop is None else replace(report, items=(*report.items, loop))


def checks_for_result(
    project: "Project", enabled: Iterable[str] = (), settings: TrialSettings | None = None, **kwargs
) -> dict:
    """What `bisect` puts under "checks" when the baseline fails: the report
    as a dict ("status", "reason", "flagged", "checks", ...). Never raises:
    the bisect result must be written even when the checks cannot run, so
    a failure becomes {"status": "error", "error": ...}."""
    try:
        return run_checks(project, enabled, settings, **kwargs).to_dict()
    except Exception as e:  # noqa: BLE001 - reported, not swallowed
        return {"status": "error", "error": f"{type(e).__name__}: {e}", "checks": []}


# -- check 7, the training loop (pure) ----------------------------------------------------
# What a hand-written GradientTape step gets wrong against `fit` (DOMAIN.md,
# "custom training loop"), judged from the step as written (annotate/loops.py's
# `step_facts`) and, where shapes are needed, from what the probed trial
# recorded (the first batch's labels, the model's output rank).
#
# - the model called without `training=True` while it has Dropout or
#   BatchNormalization (tensorflow/tensorflow#31184): those layers then run
#   as at inference;
# - labels and predictions of a hand-written loss of different rank
#   (tensorflow/tensorflow#28901): `(B,)` against `(B, 1)` broadcasts to
#   `(B, B)`; a Keras loss object brings them to the same rank, fit too;
# - a per-replica loss under `strategy.run` averaged over the replica's batch
#   instead of the global one (no `tf.nn.compute_average_loss`, no division by
#   the global batch): with N replicas the summed gradients are N times fit's.
#
# Scripts without a GradientTape step get no item.

_MODE_LAYERS = re.compile(r"\b(Dropout|SpatialDropout[123]D|GaussianDropout|AlphaDropout|BatchNormalization)\b")


def check_loop(texts: Iterable[tuple[str, str]], result: TrialResult | None) -> CheckItem | None:
    """Check 7 over the scripts' (path, text): every GradientTape step in
    them, and whether they build Dropout/BatchNorm; None without a step."""
    from tfrepro.annotate.loops import step_facts  # libcst: not on every bisect's path (it imports this module)
    from tfrepro.annotate.source import Src

    steps, mode_layers = [], False
    for path, text in texts:
        mode_layers = mode_layers or bool(_MODE_LAYERS.search(text))
        with contextlib.suppress(UserError):
            steps += [(path, f) for f in step_facts(Src(text, path))]
    if not steps:
        return None
    warnings, fixes, evidence = [], [], []
    # The ranks of the first batch's labels and of the model's output, when the probes recorded them.
    extra = result.extra if result is not None else {}
    batches = (extra.get("check.batches") or {}).get("batches") or []
    labels = batches[0].get("labels") if batches else None
    label_rank = len(labels[0]["shape"]) if labels and labels[0].get("shape") is not None else None
    out_rank = (extra.get("check.model") or {}).get("output_rank")
    out_rank = out_rank if isinstance(out_rank, int) else None
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
