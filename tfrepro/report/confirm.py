"""Which repro the bundle ships, each choice confirmed by a re-run in a fresh
process (rerun.py): trimmed (trim.py) when the trimmed one still shows the
symptom, reading synthetic stand-ins for the data (standin.py) or the few
real records that still show it (reduce.py); and the same re-run on the
newest tf-nightly (`--nightly`, nightly.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro.report.export import ENTRY, Export
from tfrepro.report.rerun import Reproduction, Runner
from tfrepro.settings import TrialSettings

if TYPE_CHECKING:
    from tfrepro.report.bundle import Context, Progress
    from tfrepro.report.nightly import NightlyRun
    from tfrepro.report.standin import DataFacts

VERDICT = {True: "reproduced", False: "NOT reproduced", None: "undecided"}


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
    spec = RerunSpec(rerun_settings(ctx), ctx.symptoms, noise=noise, max_pairs=max_pairs, expected_error=expected)
    rep = reproduce(ctx.symptom, export.cand_files, export.ref_files, spec, runner=runner, progress=say)
    say(f"re-run: {VERDICT[rep.reproduced]} ({rep.detail})")
    return rep


def _reproduce_trimmed(ctx: Context, export: Export, **kw: Any) -> tuple[Reproduction | None, Export, dict[str, Any]]:
    """The trimmed repro (report/trim.py) when a re-run shows the symptom
    with it; else the untrimmed one. Returns (reproduction, export, facts);
    `kw`: `_reproduce`'s (rerun, runner, max_pairs, say)."""
    from tfrepro.report.trim import trim_files

    cand, changes = trim_files(export.cand_files)
    if not changes:
        return _reproduce(ctx, export, **kw), export, {"trimmed": False, "changes": [], "note": "nothing to trim"}
    if not kw["rerun"]:
        note = "not trimmed: a trim is kept only when a re-run confirms it (--no-rerun)"
        return None, export, {"trimmed": False, "changes": changes, "note": note}
    trimmed = replace(export, cand_files=cand, ref_files=trim_files(export.ref_files)[0])
    kw["say"](f"trimmed {ENTRY} ({len(changes)} change{'s' if len(changes) != 1 else ''}): re-running it")
    rep = _reproduce(ctx, trimmed, **kw)
    if rep is not None and rep.reproduced is True:
        return rep, trimmed, {"trimmed": True, "changes": changes}
    kw["say"]("the trimmed repro does not show the symptom: the untrimmed one is kept")
    note = "the trimmed repro did not reproduce; untrimmed kept"
    return _reproduce(ctx, export, **kw), export, {"trimmed": False, "changes": changes, "note": note}


def with_data(ctx: Context, export: Export, *, no_data: bool, **kw: Any):
    """The repro with synthetic stand-ins for the data files it read
    (report/standin.py) when a re-run shows the symptom with them; else the
    export as it was, and the report says which data it needs."""
    from tfrepro.report.standin import with_standins

    standin, data = with_standins(export, ctx.result, ctx.entry, no_data=no_data)
    if standin is export:
        return _reduced(ctx, export, data, no_data=no_data, **kw)
    kw["say"](f"{ENTRY} reads synthetic stand-ins for {len(data.standins)} data file(s): re-running it")
    reproduction, got, trim = _reproduce_trimmed(ctx, standin, **kw)
    data = replace(data, rerun=True, standin_reproduced=reproduction.reproduced if reproduction else None)
    if reproduction is None or reproduction.reproduced is not False:
        return reproduction, got, trim, data
    kw["say"]("the stand-ins do not show the symptom: the repro keeps reading the user's data")
    note = "synthetic stand-ins did not reproduce the symptom; the repro reads the user's data"
    data = replace(data, needs_user_data=data.standins + data.needs_user_data, note=note, standins=())
    return _reduced(ctx, export, data, no_data=no_data, **kw)


def _reduced(ctx: Context, export: Export, data: DataFacts, *, no_data: bool, **kw: Any):
    """The repro reading the few real records that still show the symptom
    (report/reduce.py) when no stand-in does; else the export as it was."""
    from tfrepro.report.reduce import REFERENCE_KEY, Files, reduce_export
    from tfrepro.report.standin import reads_of

    sites, batches = reads_of(ctx.result, ctx.entry)
    if no_data or not kw.get("rerun") or not data.needs_user_data or not sites:
        return (*_reproduce_trimmed(ctx, export, **kw), data)
    kw["say"]("reducing the data: ddmin over the records the failing run read, each tried by a re-run")

    def shows(files: Files) -> bool:
        files = dict(files)
        ref = {ENTRY: files.pop(REFERENCE_KEY)} if REFERENCE_KEY in files else {}
        tried = replace(export, cand_files={**export.cand_files, **files}, ref_files={**export.ref_files, **ref})
        rep = _reproduce(ctx, tried, **kw)
        return bool(rep and rep.reproduced)

    ref_text = export.ref_files.get(ENTRY)
    got = reduce_export(Path(ctx.project.root), export.cand_files[ENTRY], sites, batches, shows, ref_text)
    data = replace(data, reduction=got)
    if got.error is not None:
        return (*_reproduce_trimmed(ctx, export, **kw), data)
    files = {**export.cand_files, ENTRY: got.text, "data.npz": got.npz}
    # reference.py reads the same kept records as repro.py (never the user's file)
    ref_files = {**export.ref_files, ENTRY: got.ref_text} if got.ref_text else export.ref_files
    reduced = replace(export, cand_files=files, ref_files=ref_files)
    kept = {f.file for f in got.files}
    data = replace(data, needs_user_data=tuple(s for s in data.needs_user_data if s.file not in kept))
    return (_reproduce(ctx, reduced, **kw), reduced, {"trimmed": False, "changes": [], "note": "data reduced"}, data)


def nightly_rerun(ctx: Context, export: Export, *, max_pairs: int, say: Progress) -> NightlyRun:
    from tfrepro.report.nightly import nightly_env, on_nightly

    def again(runner: Runner) -> Reproduction:
        say(f"re-running {ENTRY} on tf-nightly ...")
        return _reproduce(ctx, export, rerun=True, runner=runner, max_pairs=max_pairs, say=say)

    got = on_nightly(again, nightly_env(say))
    say(f"nightly: {got.version}: {VERDICT[got.reproduced]} ({got.detail})")
    return got
