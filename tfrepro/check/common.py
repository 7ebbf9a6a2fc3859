"""Values and helpers shared by the checks (`judge.py`, `data.py`): the
thresholds, the order and titles of the items, and why a probe's record
is missing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfrepro.check.checklist import CheckItem, CheckStatus
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


# the six of `judge`, then check 7 (`loops.py`), judged on the script's text
KEYS = ("environment", "input_pipeline", "first_batches", "initial_loss", "short_run", "parameters", "training_loop")
CLASSIFICATION = ("sparse", "categorical", "binary")


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
    errors = result.extra.get("check.errors") or []
    for e in errors:
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
