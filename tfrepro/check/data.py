"""Check 3, the first batches (shapes, dtypes, ranges, NaN/Inf, labels in
range, normalisation), and the number of classes the loss implies (pure);
first, what every check shares (`judge.py`, `run.py`): the thresholds, the
order and titles of the items, and why a probe's record is missing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfrepro.check.checklist import CheckItem, CheckStatus, describe_tensor, fmt_num
from tfrepro.trials.values import TrialResult


@dataclass(frozen=True)
class CheckOptions:
    """Thresholds, stated in the evidence wherever they decide."""

    expect_params: int | None = None  # total parameters the author expects
    chance_tolerance: float = 0.25  # relative, around ln(C) ...
    chance_slack_nats: float = 0.5  # ... but at least this much above it (logits of std ~1)
    chance_fail_nats: float = 2.0  # fail above ln(C) + max(ln(C), this); below ln(C) / 2
    input_scale: float = 10.0  # |mean| or std above this: far from normalised
    fall_fraction: float = 0.02  # last steps' mean at least this much below the first's
    input_bound_step_share: float = 0.3  # pipeline >= this share of the trial's quiet step
    input_bound_alone: float = 10.0  # or pipeline >= this many model steps: it bounds the throughput itself


# the six of `judge`, then check 7 (`run.py`), judged on the script's text
KEYS = ("environment", "input_pipeline", "first_batches", "initial_loss", "short_run", "parameters", "training_loop")


def item(
    key: str, status: CheckStatus, summary: str, evidence: Sequence[str] = (), fix: str | None = None
) -> CheckItem:
    """The item of check `key`, numbered and titled by it (`first_batches`: 3, "first batches")."""
    return CheckItem(KEYS.index(key) + 1, key, key.replace("_", " "), status, summary, tuple(evidence), fix)


def missing(result: TrialResult, what: str) -> str:
    """Why a probe's record is absent, as precisely as the trial tells: the
    probe's own reason (`check.skips`) first."""
    if skip := (result.extra.get("check.skips") or {}).get(what):
        return skip
    for e in result.extra.get("check.errors") or []:
        if e.split(":", 1)[0].strip() in _ERROR_SOURCES.get(what, ()):
            return f"the probe failed: {e}"
    for e in result.extra.get("harness_errors") or []:
        if e.startswith("plugin ") and "probes.py" in e:
            return f"the probes failed to load: {e}"
    if result.timed_out:
        return "the trial timed out before the probes could record it"
    if result.crashed and result.steps_run == 0:
        return f"the run crashed before training: {result.error}"
    if "check.env" not in result.extra and not result.extra.get("harness_errors"):
        return "no probe data: the trial ran without the probes (or never imported TensorFlow)"
    return "the probe recorded nothing for it"


_ERROR_SOURCES = {
    "batches": ("fit data", "dataset peek", "fit probe"),
    "timing": ("timing", "end probe"),
    "model": ("model", "model (fit)", "end probe"),
    "env": ("environment", "end probe"),
    "loss": ("compiled loss", "loss probe"),
}


# -- 3. first batches ----------------------------------------------------------------


def num_classes(loss: dict | None, model: dict | None) -> tuple[int | None, str]:
    """(C, "") for a classification loss, else (None, why not)."""
    if not loss:
        return None, "the loss was not seen (no compiled loss, no Keras loss or cross-entropy call)"
    kind = loss.get("kind")
    if kind == "multi":
        return None, "the model has one loss per output (a dict or list of losses): no single chance level"
    if kind not in ("sparse", "categorical", "binary"):
        return None, f"the loss {loss.get('name')} is not a classification loss"
    width = (model or {}).get("output_width")
    if kind == "binary":
        return 2, ""
    if width is None:
        return None, "the model's output width is unknown"
    if width < 2:
        return None, f"{loss.get('name')} over {width} output unit(s) is not a C-way classification"
    return int(width), ""


def _label_problems(t: dict, kind: str, c: int) -> list[str]:
    """Problems of one label tensor for a classification loss over c classes."""
    problems = []
    name = t.get("name") or "labels"
    if t.get("nan") or t.get("inf"):
        problems.append(f"{name}: {t.get('nan', 0)} NaN and {t.get('inf', 0)} Inf")
    if "min" not in t:
        return problems
    shape = t.get("shape") or []
    one_hot = kind == "categorical" and len(shape) >= 2 and shape[-1] == c
    if kind == "binary" or one_hot:
        if t["min"] < 0 or t["max"] > 1:
            problems.append(f"{name}: values in [{fmt_num(t['min'])}, {fmt_num(t['max'])}], outside [0, 1]")
        if one_hot and "row_sum_min" in t and (t["row_sum_min"] < 0.99 or t["row_sum_max"] > 1.01):
            problems.append(
                f"{name}: one-hot rows summing to {fmt_num(t['row_sum_min'])}..{fmt_num(t['row_sum_max'])}, "
                f"not 1 (rows of zeros come from class ids outside [0, {c}) in `tf.one_hot`)"
            )
        return problems
    if not t.get("integral", False):
        problems.append(
            f"{name}: fractional values (e.g. {fmt_num(t['min'])}..{fmt_num(t['max'])}) where class ids are expected"
        )
    if t["min"] < 0 or t["max"] >= c:
        problems.append(
            f"{name}: class ids in [{fmt_num(t['min'])}, {fmt_num(t['max'])}], outside [0, {c}) for a {c}-way output"
        )
    return problems


def _input_scale_problem(t: dict, limit: float, what: str) -> str | None:
    if t.get("kind") != "float" or "mean" not in t or t.get("size", 0) < 2:
        return None
    if abs(t["mean"]) > limit or t["std"] > limit:
        return (
            f"{what} far from normalised: mean {fmt_num(t['mean'])}, std {fmt_num(t['std'])}, range "
            f"[{fmt_num(t['min'])}, {fmt_num(t['max'])}] (|mean| or std above {fmt_num(limit)})"
        )
    if t["std"] == 0 and t["max"] == 0:
        return f"{what}: every value is 0"
    return None


def _scale_warnings(model: dict | None, first: list[dict], limit: float, evidence: list[str]) -> list[str]:
    """Inputs far from normalised: what the first weighted layer receives
    when it was seen (unless the model normalises them), else the first batch's inputs."""
    first_input = (model or {}).get("first_layer_input")
    if first_input and first_input.get("normalised_by"):
        evidence.append(f"inputs normalised in the model by {first_input['layer']} ({first_input['normalised_by']})")
        return []
    if first_input and first_input.get("stats"):
        via = ", ".join(first_input.get("via") or [])
        t = first_input["stats"]
        evidence.append(f"the first weighted layer {first_input['layer']} receives (after {via}): {describe_tensor(t)}")
        p = _input_scale_problem(t, limit, f"what {first_input['layer']} receives")
        return [p] if p else []
    found = (_input_scale_problem(t, limit, f"batch 1 {t.get('name')}") for t in first)
    return [p for p in found if p]


# (words a problem's text names, its fix)
_BATCH_FIXES = (
    (
        ("NaN", "Inf"),
        "find where the NaN/Inf come from (missing values, log(0), a division): drop or impute them "
        "in the data layer (`tf.where(tf.math.is_nan(x), 0.0, x)`); "
        "`tf.debugging.check_numerics` in a `map` finds the first one",
    ),
    (
        ("class ids", "one-hot rows", "outside [0, 1]"),
        "labels must be class ids in [0, C): shift 1-based ids (`y - 1`), or give the output layer "
        "one unit per class (C = largest id + 1)",
    ),
    (
        ("normalised", "every value is 0"),
        "standardise the inputs: a `keras.layers.Normalization()` adapted on the training data as "
        "the model's first layer, or `x / 255.0` / `(x - mean) / std` in the pipeline",
    ),
)


def check_first_batches(result: TrialResult, options: CheckOptions = CheckOptions()) -> CheckItem:
    data = result.extra.get("check.batches")
    if not data or not data.get("batches"):
        return item("first_batches", CheckStatus.SKIP, missing(result, "batches"))
    loss = result.extra.get("check.loss")
    model = result.extra.get("check.model")
    c, why_no_classes = num_classes(loss, model)
    evidence: list[str] = [f"seen at: {data.get('source')}"]
    # NaN/Inf inputs and label problems of the first two batches, each tensor described
    fails: list[str] = []
    label_problems: dict[str, list[str]] = {}  # the same problem in both batches is said once
    n_labels = 0  # label tensors per batch
    for b, batch in enumerate(data["batches"][:2], start=1):
        for role in ("inputs", "labels"):
            for t in batch.get(role) or []:
                evidence.append(f"batch {b} {t.get('name') or role}: {describe_tensor(t)}")
                if role == "inputs" and (t.get("nan") or t.get("inf")):
                    fails.append(
                        f"batch {b} {t.get('name')}: {t.get('nan', 0)} NaN and {t.get('inf', 0)} Inf "
                        f"among {t.get('size')} values"
                    )
        labels = batch.get("labels") or []
        n_labels = max(n_labels, len(labels))
        if c is not None and loss is not None and len(labels) == 1:
            for p in _label_problems(labels[0], loss["kind"], c):
                label_problems.setdefault(p, []).append(str(b))
    fails.extend(f"batch{'es' if len(bs) > 1 else ''} {' and '.join(bs)} {p}" for p, bs in label_problems.items())
    warns = _scale_warnings(model, data["batches"][0].get("inputs") or [], options.input_scale, evidence)
    if c is None:
        evidence.append(f"labels not judged: {why_no_classes}")
    elif n_labels == 0:
        evidence.append("labels not judged: the batches carry no labels")
    elif n_labels > 1:
        evidence.append(f"labels not judged: {n_labels} label tensors (one per output)")
    else:
        evidence.append(f"labels judged for {(loss or {}).get('name')} over {c} classes")
    if problems := fails + warns:
        status = CheckStatus.FAIL if fails else CheckStatus.WARN
        text = " ".join(problems)
        fix = "; ".join(fix for words, fix in _BATCH_FIXES if any(w in text for w in words)) or None
        return item("first_batches", status, "; ".join(problems), evidence, fix)
    shapes = ", ".join(
        f"{t.get('name')} {describe_tensor(t).split(' in [')[0]}"
        for role in ("inputs", "labels")
        for t in data["batches"][0].get(role) or []
    )
    return item("first_batches", CheckStatus.PASS, f"{len(data['batches'])} batch(es) look right: {shapes}", evidence)
