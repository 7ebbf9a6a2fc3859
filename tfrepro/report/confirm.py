"""Which repro the bundle ships, each choice confirmed by a re-run in a fresh
process (rerun.py): trimmed (trim.py) when the trimmed one still shows the
symptom, reading synthetic stand-ins for the data (standin.py) or the few
real records that still show it (reduce.py); and the same re-run on the
newest tf-nightly (`report --nightly`: does the exported repro still show the
symptom on TensorFlow's nightly build? The bug form asks; triagers close
issues that are already fixed on nightly).

The newest `tf-nightly` from the package index is installed once into the
user cache of per-release environments (`trials/envs.py`, the same store as
`bisect --tf-versions`); the exported repro (and its reference, when the
symptom needs one) re-runs there through the ordinary re-run
(`rerun.reproduce`). The answer fills the form's nightly question.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro.errors import TfreproError
from tfrepro.report.answer import NightlyRun
from tfrepro.report.export import ENTRY, Export
from tfrepro.report.rerun import Reproduction, Runner
from tfrepro.settings import TrialSettings

if TYPE_CHECKING:
    from tfrepro.report.bundle import Context, Progress

VERDICT = {True: "reproduced", False: "NOT reproduced", None: "undecided"}
NIGHTLY_DIST = "tf-nightly"


def rerun_settings(ctx: Context) -> TrialSettings:
    command = ctx.settings.command
    return replace(
        ctx.settings,
        entry=ENTRY,
        command=tuple(ENTRY if a == ctx.entry else a for a in command) if command else None,
        # the calls the bisect timed (fit#3...): the re-run times the same ones
        timed_calls=tuple(ctx.result.get("timed_calls") or ()),
    )


def _reproduce(
    ctx: Context, export: Export, *, rerun: bool, runner: Runner | None, max_pairs: int, say: Progress
) -> Reproduction | None:
    if not rerun:
        return None
    from tfrepro.report.rerun import RerunSpec, reproduce

    say(f"re-running {ENTRY} in a fresh process to confirm the {ctx.symptom} ...")
    expected = (ctx.result.get("culprit_trial") or ctx.result.get("failing") or {}).get("error")
    noise = float(ctx.result.get("noise") or 0.0)
    spec = RerunSpec(rerun_settings(ctx), ctx.symptoms, noise, max_pairs, expected_error=expected)
    rep = reproduce(ctx.symptom, export, spec, runner=runner, progress=say)
    say(f"re-run: {VERDICT[rep.reproduced]} ({rep.detail})")
    return rep


def _reproduce_trimmed(ctx: Context, export: Export, **kw: Any) -> tuple[Reproduction | None, Export, dict[str, Any]]:
    """The trimmed repro (report/trim.py) when a re-run shows the symptom
    with it; else the untrimmed one. Returns (reproduction, export, facts);
    `kw`: `_reproduce`'s (rerun, runner, max_pairs, say)."""
    from tfrepro.report.trim import trim_files

    cand, changes = trim_files(export.cand_files)
    if not changes:
        note = "nothing to trim"
    elif not kw["rerun"]:  # no re-run: `_reproduce` gives None
        note = "not trimmed: a trim is kept only when a re-run confirms it (--no-rerun)"
    else:
        trimmed = replace(export, cand_files=cand, ref_files=trim_files(export.ref_files)[0])
        kw["say"](f"trimmed {ENTRY} ({len(changes)} change{'s' if len(changes) != 1 else ''}): re-running it")
        rep = _reproduce(ctx, trimmed, **kw)
        if rep is not None and rep.reproduced is True:
            return rep, trimmed, {"trimmed": True, "changes": changes}
        kw["say"]("the trimmed repro does not show the symptom: the untrimmed one is kept")
        note = "the trimmed repro did not reproduce; untrimmed kept"
    return _reproduce(ctx, export, **kw), export, {"trimmed": False, "changes": changes, "note": note}


def with_data(ctx: Context, export: Export, *, no_data: bool, **kw: Any):
    """The repro reading what reduce.choose_data chose, each choice re-run
    (the stand-ins: the trimmed repro first) -> (reproduction, export, trim
    facts, data facts); `kw`: `_reproduce`'s."""
    from tfrepro.report.reduce import choose_data

    checked: list[tuple[Reproduction | None, Export, dict[str, Any]]] = []

    def check(tried: Export) -> bool | None:
        checked.append(_reproduce_trimmed(ctx, tried, **kw))
        return checked[-1][0].reproduced if checked[-1][0] else None

    def shows(tried: Export) -> bool | None:
        rep = _reproduce(ctx, tried, **kw)
        return rep.reproduced if rep else None

    on_rerun = dict(check=check, shows=shows if kw["rerun"] else None, say=kw["say"], no_data=no_data)
    got, data = choose_data(ctx.project.root, ctx.result, ctx.entry, export, **on_rerun)
    if data.kind == "standins":
        return (*checked[-1], data)
    if data.kind == "reduced":
        return _reproduce(ctx, got, **kw), got, {"trimmed": False, "changes": [], "note": "data reduced"}, data
    return (*_reproduce_trimmed(ctx, export, **kw), data)


def nightly_rerun(ctx: Context, export: Export, *, max_pairs: int, say: Progress) -> NightlyRun:
    def again(runner: Runner) -> Reproduction:
        say(f"re-running {ENTRY} on tf-nightly ...")
        return _reproduce(ctx, export, rerun=True, runner=runner, max_pairs=max_pairs, say=say)

    got = on_nightly(again, nightly_env(say))
    say(f"nightly: {got.version}: {VERDICT[got.reproduced]} ({got.detail})")
    return got


def newest_nightly(listing: Callable[[], Any] | None = None) -> str:
    """The newest tf-nightly version on the index (the cached listing when offline)."""
    from tfrepro.trials.envs import cache_root
    from tfrepro.trials.releases import list_releases, sort_versions

    got = (listing or (lambda: list_releases(NIGHTLY_DIST, cache_root())))()
    versions = sort_versions(list(got.versions))
    if not versions:
        raise TfreproError("no tf-nightly release installable here was found on the package index")
    return versions[-1]


def nightly_env(say: Callable[[str], None]) -> Any:
    """The environment of the newest nightly (built on first use), or the
    reason it cannot be had (a string)."""
    from tfrepro.trials.envs import EnvError, EnvStore, spec_for

    try:
        version = newest_nightly()
    except (TfreproError, OSError) as e:
        return f"tf-nightly: {e}"
    say(f"nightly: {NIGHTLY_DIST}=={version} (an environment in the user cache; the first time takes a minute)")
    try:
        return EnvStore().ensure(spec_for(version, tf_dist=NIGHTLY_DIST), lambda line: say(f"  {line}"))
    except EnvError as e:
        return f"no environment for {NIGHTLY_DIST} {version}: {e}"


def on_nightly(reproduce: Callable[[Any], Any], env: Any) -> NightlyRun:
    """The repro on tf-nightly (`env`: its environment, or why there is
    none); `reproduce(runner)` re-runs the export with the given runner."""
    if isinstance(env, str):
        return NightlyRun(NIGHTLY_DIST, None, env)
    from tfrepro.report.rerun import default_runner

    version = env.versions.get("tensorflow") or env.spec.tf_version
    with tempfile.TemporaryDirectory(prefix="tfrepro-nightly-") as tmp:
        rep = reproduce(default_runner(Path(tmp), python=str(env.python), versions=env.versions))
    return NightlyRun(f"{NIGHTLY_DIST} {version}", rep.reproduced, rep.detail)
