"""Does the exported repro, on its own, still show the symptom?

The bundle's files are copied to a fresh temp directory (outside the project,
so nothing but TensorFlow and NumPy is there to import) and run through the
trial machinery, which measures loss, NaN, crash and step time the same way
the bisect did; the classifier judges the result. What counts as reproduced:

- nan / crash / timeout: the exported culprit variant shows it;
- mismatch: its per-step loss deviates from the exported reference variant's
  by more than the configured tolerance;
- slowdown: timing runs with a time budget (as the bisect's), repro.py's
  each between two of reference.py's (R C R C R: a reference run serves the
  pairs on both sides of it), the harness's load measurement with each;
  `slowdown.sequential_slowdown` over the pairs says "slower" (one clear
  pair on a quiet machine is enough, else the signed-rank test).

Which repro the bundle ships, each choice confirmed by such a re-run
(`with_data`): trimmed (`trim_files`, below) when the trimmed one still shows the
symptom, reading synthetic stand-ins for the data (standin.py) or the few
real records that still show it (reduce.py); and the same re-run
(`reproduce`: the exported repro, and its reference when the symptom needs
one) on the newest tf-nightly of the package index, installed once into the
user cache of per-release environments (`trials/envs.py`, the same store as
`bisect --tf-versions`): `report --nightly`, does the exported repro still
show the symptom on TensorFlow's nightly build? The bug form asks (the
answer fills its nightly question); triagers close issues that are already
fixed on nightly.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libcst as cst
import libcst.matchers as m

from tfrepro.errors import TfreproError
from tfrepro.inside import SETUP_PLUGIN
from tfrepro.report.answer import NightlyRun, Reproduction
from tfrepro.report.export import ENTRY, Export, write_files
from tfrepro.settings import SymptomSettings, TrialSettings
from tfrepro.trials import classify
from tfrepro.trials.envs import EnvError, EnvStore, cache_root, spec_for
from tfrepro.trials.releases import list_releases, sort_versions
from tfrepro.trials.slowdown import SequentialPolicy
from tfrepro.trials.timing import TIMING_BASELINE, TIMING_CANDIDATE, TimingPool, stopped
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

if TYPE_CHECKING:
    from tfrepro.report.bundle import Context, Progress

# (project_dir, settings) -> TrialResult. The default runs a real trial.
Runner = Callable[[Path, TrialSettings], TrialResult]
VERDICT = {True: "reproduced", False: "NOT reproduced", None: "undecided"}
NIGHTLY_DIST = "tf-nightly"


def default_runner(
    state_dir: Path,
    *,
    python: str | None = None,
    versions: Mapping[str, str | None] | None = None,
    label: str = "report-rerun",
    cold: bool = False,
) -> Runner:
    """Trials of an exported repro, as written, each process describing its
    environment (`inside/envprobe.py`, `install`); under `python` (another
    environment's interpreter, e.g. tf-nightly's) when given."""
    how = TrialOptions(
        label=label,
        state_dir=state_dir,
        python=python,
        versions=versions,
        cold=cold,
        plugins=(SETUP_PLUGIN,),
        plugin_options={"environment": True},
    )
    return lambda project_dir, settings: run_as_written(project_dir, settings, how)


def run_as_written(project_dir: Path, settings: TrialSettings, how: TrialOptions) -> TrialResult:
    """One trial of the script dir `project_dir` as written, never cached
    (the report's re-runs, the localize and environment trials). As written:
    an exported repro has no markers, and zero-edit detection would find (and
    switch OFF) the very culprit it exports."""
    from tfrepro.project import Project
    from tfrepro.trials.runner import run_trial

    return run_trial(Project.load(project_dir, detect=False), (), settings, replace(how, use_cache=False))


@dataclass(frozen=True)
class RerunSpec:
    """What a re-run judges by: the trial `settings` (entry, steps, budget),
    the `symptoms` thresholds, the bisect's `noise`, at most `max_pairs`
    timing pairs for a slowdown, the crash the bisect saw
    (`expected_error`: exception type and message), when it is known, and
    the name the bundle gives the reference, for the details (`reproduce`
    sets it: `Export.ref_name`)."""

    settings: TrialSettings
    symptoms: SymptomSettings
    noise: float = 0.0
    max_pairs: int = 5
    expected_error: str | None = None
    reference: str = "reference.py"


def reproduce(
    symptom: str,
    export: Export,
    spec: RerunSpec,
    *,
    runner: Runner | None = None,
    progress: Callable[[str], None] | None = None,
) -> Reproduction:
    """Re-run the `export`'s culprit variant (entry `spec.settings.entry`)
    and, when the symptom needs one, its reference, each in a dir of its own
    with the records a reduced export reads (a crash: `same_error`)."""
    with tempfile.TemporaryDirectory(prefix="tfrepro-rerun-") as tmp:
        root = Path(tmp)
        cand_dir = write_files(root / "candidate", export.cand_files, export.data)
        ref_dir = write_files(root / "reference", export.ref_files, export.data)
        runner = runner or default_runner(root / "state")
        spec = replace(spec, settings=replace(spec.settings, repeat=0), reference=export.ref_name)
        if symptom == Verdict.SLOWDOWN.value:
            return _slowdown(cand_dir, ref_dir, spec, runner, progress)
        cand = runner(cand_dir, spec.settings)
        ref = runner(ref_dir, spec.settings) if symptom in (Verdict.MISMATCH.value, Verdict.MEMORY.value) else None
        # whether `cand` (against `ref`, for a mismatch or memory) shows `symptom`
        memory = symptom == Verdict.MEMORY.value
        baselines = [ref] if memory and ref is not None else ()
        seen = classify.symptoms(
            cand, reference=None if memory else ref, settings=spec.symptoms, noise=spec.noise, baselines=baselines
        )
        hunted = next((v for v in Verdict if v.value == symptom), None)
        verdict = classify.primary(seen, hunted)
        # a crash shows only as the bisect's own (same exception and message)
        shown = verdict.value == symptom and (symptom != "crash" or same_error(cand.error, spec.expected_error))
        detail = _detail(symptom, cand, ref, spec, shown=shown, verdict=verdict)
        if not shown and verdict not in (Verdict.OK, hunted):
            detail += f"; it showed {verdict.value} instead"
        return Reproduction(
            symptom, shown, detail, verdict.value, cand.to_dict(), ref.to_dict() if ref is not None else None
        )


def _detail(
    symptom: str, cand: TrialResult, ref: TrialResult | None, spec: RerunSpec, *, shown: bool, verdict: Verdict
) -> str:
    """What the re-run saw, in one clause of the report."""
    if symptom == "nan":
        if cand.first_nonfinite_step is not None:
            return f"the loss became non-finite at step {cand.first_nonfinite_step}"
        if cand.weights_finite is False:
            return "the weights were non-finite at the end of training"
        last = "n/a" if cand.last_loss is None else f"{cand.last_loss:.4g}"
        return f"the loss stayed finite over {cand.steps_run} steps (last loss {last})"
    if symptom == "crash":
        detail = f"the script raised: {cand.error}" if cand.crashed else "the script ran to the end"
        if cand.crashed and not shown:
            detail += f", not the bisect's {spec.expected_error}"
        return detail
    if symptom == "timeout":
        return (
            f"the script did not finish within {spec.settings.timeout_s:.0f} s"
            if cand.timed_out
            else f"the script finished in {cand.wall_s:.1f} s"
        )
    if symptom == "mismatch" and ref is not None:
        dev = classify.loss_deviation(cand.losses, ref.losses)
        tol = classify.mismatch_tolerance(spec.symptoms, spec.noise)
        return (
            f"largest per-step relative loss deviation from {spec.reference}: {dev:.3g} "
            f"(tolerance {tol:.3g}) over {min(len(cand.losses), len(ref.losses))} steps"
        )
    if symptom == Verdict.MEMORY.value and ref is not None:
        return f"against {spec.reference}: {classify.decide_memory(cand, [ref], spec.symptoms.memory).reason}"
    return f"verdict {verdict.value}"


def same_error(got: str | None, expected: str | None) -> bool:
    """Same exception type and message (the last traceback line), ignoring
    what differs between two runs of the same failure: memory addresses,
    temp paths, spacing. Unknown expectations match any crash."""
    return not expected or _error_key(got or "") == _error_key(expected)


def _error_key(line: str) -> str:
    line = re.sub(r"0x[0-9a-fA-F]+", "0x?", line.strip().splitlines()[-1] if line.strip() else "")
    line = re.sub(r"/\S*/(tfrepro-rerun-|tmp)\S*", "<tmp>", line)
    return " ".join(line.split())


def _slowdown(
    cand_dir: Path, ref_dir: Path, spec: RerunSpec, runner: Runner, progress: Callable[[str], None] | None = None
) -> Reproduction:
    """R C R C R ...: repro.py between two reference.py runs, never
    concurrently, through the bisect's own timing pool (trials/timing.py)."""
    settings, max_pairs = spec.settings, spec.max_pairs
    timed = settings.timed()
    runs: dict[str, list[TrialResult]] = {"reference": [], "repro": []}

    def trial(key: str, repeat: int, role: str) -> TrialResult:
        repro = key == "repro"
        if repro and progress:
            progress(
                f"  timing pair {len(runs[key]) + 1} (at most {max_pairs}): repro.py between two {spec.reference} runs"
            )
        number = repeat - (TIMING_CANDIDATE if repro else TIMING_BASELINE)
        runs[key].append(runner(cand_dir if repro else ref_dir, replace(timed, repeat=number)))
        return runs[key][-1]

    pool: TimingPool[str] = TimingPool(
        trial,
        lambda _key, r: stopped(r, settings.steps) or Verdict.OK,
        spec.symptoms.slowdown,
        "reference",
        steps=settings.steps,
        name=spec.reference,
    )
    out = pool.timed("repro", SequentialPolicy(min_samples=min(3, max_pairs), max_samples=max_pairs))
    # (reproduced, detail); `pool.why`: the reasons a run could not be timed, the last one first to tell
    threshold, n = spec.symptoms.slowdown, len(out.pairs)
    if out.stopped is Verdict.UNTESTABLE:
        reproduced, detail = None, f"could not be timed: {pool.why[-1] if pool.why else 'untestable'}"
    elif out.stopped is not None:
        reproduced, detail = False, f"a timing run of repro.py stopped with {out.stopped.value}"
    elif out.verdict == Verdict.SLOWDOWN:
        test = f"{n} clear-cut pair{'s' if n != 1 else ''}" if out.fast else f"p={out.p_value:.3g}, {n} pairs"
        reproduced = True
        detail = (
            f"median step time {out.ratio:.2f}x that of {spec.reference} "
            f"(threshold {threshold}x, {test}; repro.py between two {spec.reference} runs)"
        )
    elif out.conclusive:
        reproduced = False
        detail = f"not slower: median step time ratio {out.ratio:.2f}x (threshold {threshold}x, {n} pairs)"
    else:
        ratio = f"{out.ratio:.2f}x" if out.ratio is not None else "n/a"
        reproduced, detail = None, f"inconclusive after {n} pairs: ratio {ratio} (threshold {threshold}x)"
    cand, ref = (r[-1].to_dict() if r else None for r in (runs["repro"], runs["reference"]))
    return Reproduction("slowdown", reproduced, detail, out.verdict.value, cand, ref, out.to_dict())


# --------------------------------------------------------------------------- the trimmed repro


_SCOPE = m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("scope")), args=[])  # `NAME.scope()`
_GET_STRATEGY = m.Call(
    func=m.Attribute(value=m.Attribute(value=m.Name(), attr=m.Name("distribute")), attr=m.Name("get_strategy")), args=[]
)


def _names(tree: cst.CSTNode) -> Counter[str]:
    """How often each bare name is read or written (imports' own names excluded)."""
    imports = m.findall(tree, m.Import() | m.ImportFrom())
    seen = Counter(n.value for n in m.findall(tree, m.Name()))  # type: ignore[attr-defined]
    return seen - Counter(n.value for s in imports for n in m.findall(s, m.Name()))  # type: ignore[attr-defined]


def _scope_only_strategies(tree: cst.Module, counts: Counter[str]) -> set[str]:
    """Names bound once to get_strategy() and used only as `with NAME.scope():`."""
    found = m.findall(tree, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=_GET_STRATEGY))
    bound = [s.targets[0].target.value for s in found]  # type: ignore[attr-defined]
    withs = m.findall(tree, m.With(items=[m.WithItem(item=_SCOPE, asname=None)]))
    scopes = Counter(w.items[0].item.func.value.value for w in withs)  # type: ignore[attr-defined]
    return {n for n in bound if bound.count(n) == 1 and scopes[n] and counts[n] == 1 + scopes[n]}


class _Trim(cst.CSTTransformer):
    def __init__(self, strategies: set[str], unused: set[str]) -> None:
        self.strategies, self.unused, self.changes = strategies, unused, []

    def _drop_stmt(self, s: cst.BaseSmallStatement | None) -> bool:
        if not m.matches(s, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
            return False
        name = s.targets[0].target.value  # type: ignore[union-attr]
        if m.matches(s.value, m.Name(name)):  # type: ignore[union-attr]
            self.changes.append(f"removed the self-assignment {name} = {name}")
        elif name in self.strategies and m.matches(s.value, _GET_STRATEGY):  # type: ignore[union-attr]
            self.changes.append(f"removed {name} = ...get_strategy() and unwrapped `with {name}.scope():`")
        else:
            return False
        return True

    def leave_SimpleStatementLine(self, original, updated):
        s = updated.body[0] if len(updated.body) == 1 else None
        if self._drop_stmt(s):
            return cst.RemoveFromParent()
        if isinstance(s, (cst.Import, cst.ImportFrom)) and not isinstance(s.names, cst.ImportStar):
            if isinstance(s, cst.ImportFrom) and m.matches(s.module, m.Name("__future__")):
                return updated
            keep = [a for a in s.names if _bound(a) not in self.unused]
            if len(keep) == len(s.names):
                return updated
            self.changes.extend(f"removed the unused import {_bound(a)}" for a in s.names if a not in keep)
            if not keep:
                return cst.RemoveFromParent()
            keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(body=[s.with_changes(names=keep)])
        return updated

    def leave_With(self, original, updated):
        scoped = len(updated.items) == 1 and m.matches(updated.items[0].item, _SCOPE)
        if scoped and updated.items[0].item.func.value.value in self.strategies:  # type: ignore[attr-defined]
            return cst.FlattenSentinel(list(updated.body.body))  # type: ignore[attr-defined]
        return updated


def _bound(alias: cst.ImportAlias) -> str:
    return alias.evaluated_alias or alias.evaluated_name.split(".")[0]  # `import a.b` binds `a`


def trim_source(text: str) -> tuple[str, list[str]]:
    """(trimmed text, what was removed); the text unchanged when it does not
    parse. Trimmed (libcst, source-preserving): what the export leaves
    behind once the inactive feature code is gone.

    - `X = X` self-assignments (a feature's OFF part that only kept a name);
    - `strategy = tf.distribute.get_strategy()` whose only use is
      `with strategy.scope():`, the `with` unwrapped (the default strategy's
      scope does nothing);
    - module-level imports no code uses any more (never `from __future__`,
      never a star import, none at all when the module defines `__all__`).

    Dead assignments in general are left alone (a name read by `eval`, a
    callback or another module cannot be told apart cheaply)."""
    try:
        tree = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return text, []
    changes: list[str] = []
    for _ in range(3):  # removing one thing can make an import unused
        counts = _names(tree)
        imports = [s for s in m.findall(tree, m.Import() | m.ImportFrom()) if not isinstance(s.names, cst.ImportStar)]
        imported = {_bound(a) for s in imports for a in s.names}  # type: ignore[attr-defined]
        unused = set() if counts["__all__"] else {n for n in imported if not counts[n]}
        t = _Trim(_scope_only_strategies(tree, counts), unused)
        new = tree.visit(t)
        if not t.changes:
            break
        tree, changes = new, changes + t.changes
    return tree.code, changes


def trim_files(files: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Every .py file trimmed (a name another module imports from this one
    is not seen: the bundle's re-run is what guards against that)."""
    out, changes = {}, []
    for rel, text in files.items():
        out[rel], done = trim_source(text) if rel.endswith(".py") else (text, [])
        changes.extend(f"{rel}: {c}" for c in done)
    return out, changes


# --------------------------------------------------------------------------- which repro the bundle ships


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
    say(f"re-running {ENTRY} in a fresh process to confirm the {ctx.symptom} ...")
    expected = (ctx.result.get("culprit_trial") or ctx.result.get("failing") or {}).get("error")
    noise = float(ctx.result.get("noise") or 0.0)
    spec = RerunSpec(rerun_settings(ctx), ctx.symptoms, noise, max_pairs, expected_error=expected)
    rep = reproduce(ctx.symptom, export, spec, runner=runner, progress=say)
    say(f"re-run: {VERDICT[rep.reproduced]} ({rep.detail})")
    return rep


def _reproduce_trimmed(ctx: Context, export: Export, **kw: Any) -> tuple[Reproduction | None, Export, dict[str, Any]]:
    """The trimmed repro (`trim_files`) when a re-run shows the symptom
    with it; else the untrimmed one. Returns (reproduction, export, facts);
    `kw`: `_reproduce`'s (rerun, runner, max_pairs, say)."""
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

    def shows(tried: Export) -> bool | None:  # only with a re-run: `_reproduce` gives a Reproduction
        return _reproduce(ctx, tried, **kw).reproduced  # type: ignore[union-attr]

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
    got = (listing or (lambda: list_releases(NIGHTLY_DIST, cache_root())))()
    versions = sort_versions(list(got.versions))
    if not versions:
        raise TfreproError("no tf-nightly release installable here was found on the package index")
    return versions[-1]


def nightly_env(say: Callable[[str], None]) -> Any:
    """The environment of the newest nightly (built on first use), or the
    reason it cannot be had (a string)."""
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
    version = env.versions.get("tensorflow") or env.spec.tf_version
    with tempfile.TemporaryDirectory(prefix="tfrepro-nightly-") as tmp:
        rep = reproduce(default_runner(Path(tmp), python=str(env.python), versions=env.versions))
    return NightlyRun(f"{NIGHTLY_DIST} {version}", rep.reproduced, rep.detail)
