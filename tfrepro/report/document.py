"""report.json: everything ISSUE.md says, as data (the run's result, the
exported repro, the re-run, the localisation, the environment, the setup)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from tfrepro import __version__
from tfrepro.report.answer import Evidence, Localization, NightlyRun, Report, Repro, Reproduction, of
from tfrepro.report.export import ENTRY, Export
from tfrepro.report.records import ResultJson
from tfrepro.report.rerun import rerun_settings
from tfrepro.report.scan import Setup, extra_imports, merge_runtime, scan_setup
from tfrepro.report.scrub import Scrubber, capture_env, withheld_count

if TYPE_CHECKING:
    from tfrepro.report.bundle import Context, Progress


# The files every bundle has besides its artifacts.
OWN_FILES = {
    "ISSUE.md": "this issue text",
    "report.json": "everything in ISSUE.md, as data",
    "result.json": "the bisect result this report was made from",
}


def _setup_facts(export: Export, reproduction: Reproduction | None, loc: Localization | None) -> Setup:
    """Precision, replicas, XLA...: read from the source, then corrected by
    what the re-run and the localisation saw at run time."""
    rerun = reproduction.trial if reproduction else None
    return merge_runtime(scan_setup(export.cand_files[ENTRY]), rerun, loc.settings if loc else None)


def document(
    ctx: Context,
    export: Export,
    *,
    reproduction: Reproduction | None,
    loc: Localization | None,
    env_facts: dict[str, Any],
    environ: dict[str, str],
    scrubber: Scrubber,
    artifacts: dict[str, str],
) -> Report:
    """report.json: everything ISSUE.md says, as data."""
    result, project = ctx.result, ctx.project
    # the run's result fields answer.Evidence names; the replicas the trials ran with
    evidence = {f.name: result.get(f.name) for f in fields(Evidence)} | {"replicas": ctx.settings.replicas}
    reference = reproduction.reference if reproduction and ctx.symptom == "mismatch" else None
    command = rerun_settings(ctx).command
    return Report(
        tfrepro_version=__version__,
        run_id=ctx.run_dir.name,
        run_dir=str(ctx.run_dir),
        project=str(project.root),
        status=result.get("status"),
        symptom=ctx.symptom,
        culprits=list(result.get("culprits") or []),
        culprit_config=list(export.cand_cfg or []),
        reference_config=list(export.ref_cfg or []),
        first_bad_commit=result.get("first_bad_commit"),
        commit=result.get("commit"),
        follows=result.get("follows"),
        nightly=_nightly(result),
        features={
            n: {"description": project.description(n), "affects_loss": n in project.affects_loss}
            for n in project.feature_names
        },
        settings=ctx.settings.to_dict(),
        symptom_settings=ctx.symptoms,
        baseline=result.get("baseline") or {},
        failing=result.get("failing") or {},
        culprit_trial=result.get("culprit_trial") or result.get("failing") or {},
        evidence=Evidence(**evidence),  # type: ignore[arg-type]
        environment=env_facts,
        env_vars=capture_env(environ, scrubber),
        redacted_env_count=withheld_count(environ),
        setup=_setup_facts(export, reproduction, loc),
        reproduction=reproduction,
        localization=loc,
        repro=Repro(
            entry=ENTRY,
            files=sorted(export.cand_files),
            code=export.cand_files[ENTRY],  # type: ignore[arg-type]
            extra_imports=extra_imports(export.cand_files),
            reference=export.ref_name,
            diff=export.diff,
            command=shlex.join(["python", *command[1:]]) if command else f"python {ENTRY}",
        ),
        artifacts={**artifacts, **OWN_FILES},
        reference_trial=reference or None,
    )


def _nightly(result: ResultJson) -> NightlyRun | None:
    """Whether a nightly build was tried: a `nightly` record of the run (an
    older result.json's), or a nightly among a version bisect's trials."""
    if isinstance(result.get("nightly"), dict):
        return of(NightlyRun, result["nightly"])
    for row in result.get("version_trials") or []:
        version = str(row.get("version") or "")
        if "dev" in version or "nightly" in version:
            verdict = row.get("verdict")
            return NightlyRun(version, verdict == result.get("symptom"), f"the version bisect's trial: {verdict}")
    return None


def environment_facts(
    reproduction: Reproduction | None, *, probe: bool, python: str | None, environ: Mapping[str, str], say: Progress
) -> dict[str, Any]:
    """The re-run's process described itself; otherwise a child of its own.
    The library path the CUDA libraries load from comes from `environ`."""
    facts = ((reproduction.candidate or {}).get("extra") or {}).get("environment") if reproduction else None
    if facts and "probe_error" not in facts:
        facts = {**facts, "collected_in": "the re-run of repro.py"}
    elif not probe:
        facts = {"probe_error": "environment probe not run"}
    else:
        from tfrepro.report import envreport

        say("describing the environment (versions, devices) in a TensorFlow child ...")
        facts = envreport.in_trial(python=python)
    if environ.get("LD_LIBRARY_PATH"):
        facts = {**facts, "ld_library_path": environ["LD_LIBRARY_PATH"]}
    return facts
