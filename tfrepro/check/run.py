"""`tfrepro check` (the edge): one probed trial of a configuration → CheckReport.

All probes run in ONE trial through the ordinary trial machinery (variant,
fresh process, harness, cache); the probe plugin records facts and the pure
`tfrepro.check.judge.judge` turns them into the checklist. `run_checks` is also
what `tfrepro bisect` calls when the baseline itself fails, so that
`baseline-fails` comes with a reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from tfrepro.check.judge import CheckOptions, CheckReport, judge
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
    if all_:
        return frozenset(project.feature_names)
    from tfrepro import catalog

    return frozenset(n for n in project.feature_names if catalog.kind_of(n) == "loop")


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
    return _with_loop_check(report, project, result)


def _with_loop_check(report: CheckReport, project: "Project", result: TrialResult) -> CheckReport:
    """Check 7 (check/loops.py) for a script with a GradientTape step: its entry scripts as written."""
    from tfrepro.annotate.zeroedit import entry_scripts
    from tfrepro.check.loops import check_loop, facts_of

    trial = project.manifest.trial
    texts = []
    for rel in entry_scripts(trial.entry, trial.command, project.files):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            texts.append((rel, (project.root / rel).read_text(encoding="utf-8")))
    item = check_loop(*facts_of(texts), result)
    return report if item is None else replace(report, items=(*report.items, item))


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
