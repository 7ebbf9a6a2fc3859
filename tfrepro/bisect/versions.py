"""Version bisection: the first TensorFlow release whose trial shows the symptom (EDGE).

`tfrepro bisect --tf-versions A,B,... [PATH]` runs the project *as written*
(as commit mode does) once per tried release, each in its own cached
environment (`trials/envs.py`). The search is `rangesearch.bisect_range`
over the releases ordered from the good end to the bad end; the trial for a
release is an injected `VersionTrial`, so the whole search is tested with fakes.

Invariants:
- The good end is `--good`, else the oldest listed release; the bad end
  `--bad`, else the newest. Both ends are tried first and decide the symptom
  hunted (the bad end's first symptom, unless `--symptom`); the good end's
  trial is the reference for mismatch and slowdown.
- A release whose environment cannot be built, or whose trial stops on a
  symptom other than the one hunted, is a skip with its reason (`git bisect
  skip`); skips that hide the answer give `candidates`, never a guess.
- Every trial goes through the trial cache, keyed by the versions inside its
  environment (not the driver's), so a rerun is cache hits.
- The result fills `first_bad_version` and `last_good_version` (Contract 4),
  a per-release table (version, verdict, symptom, note) and `follows`: whether
  the change comes with the Keras 2 -> Keras 3 switch ("keras") or not
  ("tensorflow").
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from tfrepro.bisect.commits import (
    _shown_path,
    as_written,
    full_summary,
    load_settings,
    project_root,
    trial_summary,
)
from tfrepro.bisect.rangesearch import STOPPERS, Mark, bisect_range, judge
from tfrepro.errors import UserError
from tfrepro.settings import WARMUP_STEPS, SymptomSettings, TrialSettings
from tfrepro.trials.state import StateDir, write_trial_record
from tfrepro.trials.values import SYMPTOM_ORDER, TrialResult, Verdict

# One trial of the project under a release's environment, or why that release
# cannot be tried (its environment failed to build).
VersionTrial = Callable[[str, TrialSettings], "TrialResult | str"]
# Progress for the CLI: event name and details.
EventFn = Callable[[str, dict[str, Any]], None]
LEGACY_KERAS_ENV = {"TF_USE_LEGACY_KERAS": "1"}
_TF_KERAS_USE = re.compile(r"\btf\.keras\b|\btensorflow\.keras\b|from\s+tensorflow\s+import\s+[^\n]*\bkeras\b")


@dataclass(frozen=True)
class FeatureStart:
    """What `--then-features` needs to bisect features inside the first bad
    release: the project and a `run_trial`-compatible runner bound to that
    release's environment (for `LocalExecutor(runner=...)`)."""

    project_root: Path
    version: str
    python: str | None
    versions: dict = field(default_factory=dict, compare=False, hash=False)
    env: dict = field(default_factory=dict, compare=False, hash=False)

    def runner(self) -> Callable[..., TrialResult]:
        from tfrepro.trials.runner import run_trial

        return partial(run_trial, python=self.python, versions=self.versions or None, env=self.env or None)


FeatureHook = Callable[[FeatureStart], dict]


def uses_tf_keras(root: Path) -> bool:
    """Whether the project's Python files reach Keras through TensorFlow
    (`tf.keras`, `tensorflow.keras`): only then does TF_USE_LEGACY_KERAS matter."""
    from tfrepro.project import iter_project_files

    for rel in iter_project_files(root):
        if rel.suffix == ".py":
            try:
                if _TF_KERAS_USE.search((root / rel).read_text(encoding="utf-8", errors="replace")):
                    return True
            except OSError:
                continue
    return False


class EnvTrial:
    """The default `VersionTrial`: builds (or reuses) the release's
    environment, then runs the project there through the trial cache."""

    def __init__(self, root: Path, state_dir: Path, *, store: Any = None, tf_dist: str | None = None,
                 legacy_keras: bool = False, use_cache: bool = True, on_line: Callable[[str], None] | None = None):
        from tfrepro.trials.envs import EnvStore, detect_tf_dist

        self.root, self.state_dir, self.use_cache = root, state_dir, use_cache
        self.store = store or EnvStore()
        self.tf_dist = tf_dist or detect_tf_dist()
        self.legacy_keras = legacy_keras
        self.on_line = on_line or (lambda line: None)
        self.envs: dict[str, Any] = {}  # version -> Env, or the reason it failed
        self.project = as_written(root)

    def env_for(self, version: str) -> Any:
        from tfrepro.trials.envs import EnvError, spec_for

        if version not in self.envs:
            spec = spec_for(version, self.root, tf_dist=self.tf_dist, legacy_keras=self.legacy_keras)
            try:
                self.envs[version] = self.store.ensure(spec, self.on_line)
            except EnvError as e:
                self.envs[version] = f"no environment for {self.tf_dist} {version}: {e}"
        return self.envs[version]

    def extra_env(self) -> dict[str, str]:
        return dict(LEGACY_KERAS_ENV) if self.legacy_keras else {}

    def start_for(self, version: str) -> FeatureStart:
        env = self.env_for(version)
        if isinstance(env, str):
            return FeatureStart(self.root, version, None, {}, self.extra_env())
        return FeatureStart(self.root, version, str(env.python), dict(env.versions), self.extra_env())

    def __call__(self, version: str, settings: TrialSettings) -> TrialResult | str:
        from tfrepro.trials.runner import run_trial

        env = self.env_for(version)
        if isinstance(env, str):
            return env
        return run_trial(self.project, (), settings, use_cache=self.use_cache, label=f"tf {version}",
                         state_dir=self.state_dir, env=self.extra_env() or None, python=str(env.python),
                         versions=env.versions)


@dataclass(frozen=True)
class Row:
    """One release in the result's table."""

    version: str
    verdict: str  # "ok", the symptom, "untestable", or "not tried"
    shows: tuple[str, ...] = ()
    note: str | None = None
    tensorflow: str | None = None
    keras: str | None = None
    keras_lib: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "verdict": self.verdict, "symptom": self.shows[0] if self.shows else None,
                "shows": list(self.shows), "note": self.note, "tensorflow": self.tensorflow,
                "keras": self.keras, "keras_lib": self.keras_lib}


class _Run:
    """The state of one version bisection."""

    def __init__(self, trial: VersionTrial, settings: TrialSettings, symptoms: SymptomSettings, run_dir: Path,
                 on_event: EventFn) -> None:
        self.trial, self.settings, self.symptoms, self.run_dir = trial, settings, symptoms, run_dir
        self.on_event = on_event
        self.trials = self.cached = 0
        self.noise = 0.0
        self.results: dict[str, TrialResult] = {}
        self.rows: dict[str, Row] = {}
        self.table: list[dict[str, Any]] = []

    def run(self, version: str, repeat: int = 0) -> TrialResult | str:
        self.on_event("running", {"version": version, "repeat": repeat})
        result = self.trial(version, replace(self.settings, repeat=repeat))
        if isinstance(result, str):
            return result
        self.trials += 1
        self.cached += bool(result.cached)
        if not result.could_not_run:
            self.results.setdefault(version, result)
        rel = f"trials/{self.trials:03d}-tf{version}-r{repeat}"
        write_trial_record(self.run_dir / rel, full_summary(result), result.log_dir)
        entry = {"version": version, "repeat": repeat, **trial_summary(result), "key": result.key,
                 "wall_s": result.wall_s, "summary": f"{rel}/summary.json"}
        self.table.append(entry)
        self.on_event("trial", entry)
        return result.error or "could not run" if result.could_not_run else result

    def shows(self, result: TrialResult, reference: TrialResult | None) -> frozenset[Verdict]:
        from tfrepro.trials.classify import symptoms

        return symptoms(result, reference=reference, settings=self.symptoms, noise=self.noise)

    def slower(self, good: str, version: str) -> tuple[bool, str | None]:
        from tfrepro.trials.classify import sequential_slowdown

        def pair(i: int) -> tuple[float, float] | Verdict:
            a, b = self.run(good, i), self.run(version, i)
            if isinstance(a, str) or isinstance(b, str) or a.crashed or b.crashed or b.nonfinite:
                return Verdict.UNTESTABLE
            ta, tb = a.median_step_time(), b.median_step_time()
            return Verdict.UNTESTABLE if ta is None or tb is None else (ta, tb)

        out = sequential_slowdown(pair, self.symptoms.slowdown, rng=random.Random(self.settings.seed))
        if out.stopped is not None:
            return False, f"could not be timed ({out.stopped.value})"
        return out.verdict is Verdict.SLOWDOWN, None

    def record(self, version: str, mark: Mark, verdict: Verdict, shows: frozenset[Verdict] = frozenset(),
               note: str | None = None) -> Mark:
        r = self.results.get(version)
        v = (r.extra.get("versions") or {}) if r else {}
        lib = r.extra.get("keras") if r else None
        keras = v.get("tf_keras") if lib == "tf_keras" else v.get("keras")
        order = tuple(s.value for s in SYMPTOM_ORDER if s in shows)
        self.rows[version] = Row(version, verdict.value, order, note, v.get("tensorflow") or (r and r.tf_version),
                                 keras or (r and r.keras_version), lib)
        self.on_event("tried", self.rows[version].to_dict())
        return mark


def _first(shown: frozenset[Verdict]) -> Verdict | None:
    return next((v for v in SYMPTOM_ORDER if v in shown), None)


def order_range(versions: Sequence[str], good: str | None, bad: str | None) -> list[str]:
    """The releases from the good end to the bad end (descending when the good
    end is the newer one: "which release fixed it")."""
    from tfrepro.trials.releases import sort_versions

    listed = sort_versions([*versions, *(v for v in (good, bad) if v)])
    g, b = good or listed[0], bad or listed[-1]
    if g == b:
        raise UserError(f"the good and the bad end are the same release ({g})",
                        hint="give two different releases, e.g. --good 2.15.1 --bad 2.16.2")
    i, j = listed.index(g), listed.index(b)
    return listed[i : j + 1] if i < j else listed[j : i + 1][::-1]


def follows(rows: dict[str, Row], last_good: str | None, first_bad: str | None) -> tuple[str | None, str | None]:
    """("keras" | "tensorflow", why) at the boundary, from the Keras each side ran."""
    a, b = rows.get(last_good or ""), rows.get(first_bad or "")
    if not a or not b:
        return None, None

    def major(r: Row) -> int | None:
        if r.keras_lib == "tf_keras":
            return 2
        m = re.match(r"(\d+)", r.keras or "")
        return int(m.group(1)) if m else None

    ka, kb = major(a), major(b)
    if ka is not None and kb is not None and ka != kb:
        return "keras", (f"the behaviour changes with Keras {ka} -> {kb} ({a.version}: {a.keras_lib or 'keras'} "
                         f"{a.keras}, {b.version}: {b.keras_lib or 'keras'} {b.keras}); --keras legacy runs tf.keras "
                         "as tf_keras (Keras 2) to tell whether TensorFlow itself changed")
    return "tensorflow", f"the same Keras major on both sides ({a.keras_lib or 'keras'} {ka} -> {kb})"


def bisect_versions(
    path: str | Path, versions: Sequence[str], *, good: str | None = None, bad: str | None = None,
    symptom: Verdict | None = None, settings: TrialSettings | None = None, symptoms: SymptomSettings | None = None,
    trial: VersionTrial | None = None, use_cache: bool = True, legacy_keras: bool = False, tf_dist: str | None = None,
    store: Any = None, on_event: EventFn | None = None, then_features: FeatureHook | None = None,
    excluded: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Find the first release (from the good end to the bad end) whose trial
    shows the symptom. Returns the Contract 4 object (also written to
    `<run_dir>/result.json`). `trial` None builds the environments
    (`EnvTrial`); `then_features`, when the answer is found, is called with the
    first bad release's `FeatureStart` and its answer kept as `then_features`."""
    started = time.monotonic()
    root, entry = project_root(path)
    items = order_range(versions, good, bad)
    if settings is None or symptoms is None:
        t, s = load_settings(root)
        settings, symptoms = settings or t, symptoms or s
    if entry and settings.command is None:
        settings = replace(settings, entry=entry)
    if symptom is Verdict.SLOWDOWN and settings.steps < WARMUP_STEPS + 2:
        raise UserError(f"a slowdown needs steps past the {WARMUP_STEPS} warm-up steps",
                        hint=f"use --steps {WARMUP_STEPS + 10} or more")
    state = StateDir.of(root)
    state_dir = state.ensure()
    run_dir = state.new_run_dir()
    emit = on_event or (lambda kind, data: None)
    notes: list[str] = []
    if legacy_keras and not uses_tf_keras(root):
        notes.append("--keras legacy: the project does not use tf.keras, so TF_USE_LEGACY_KERAS changes nothing")
    env_trial = None
    if trial is None:
        env_trial = EnvTrial(root, state_dir, store=store, tf_dist=tf_dist, legacy_keras=legacy_keras,
                             use_cache=use_cache, on_line=lambda line: emit("env", {"line": line}))
        trial = env_trial
    emit("range", {"good": items[0], "bad": items[-1], "versions": items, "run_dir": str(run_dir)})
    b = _Run(trial, settings, symptoms, run_dir, emit)
    out = _search(b, items, symptom)
    first_bad = out.get("first_bad_version")
    last_good = items[items.index(first_bad) - 1] if first_bad else out.get("last_good_version")
    lib_follows, follows_note = follows(b.rows, last_good, first_bad)
    from tfrepro.trials.releases import sort_versions

    table = []
    for v in sort_versions([*versions, items[0], items[-1]]):
        row = b.rows.get(v) or Row(v, "not tried", note="outside the good..bad range" if v not in items
                                   else "not needed by the bisection")
        table.append(row.to_dict())
    table += [Row(v, "excluded", note=why).to_dict() for v, why in excluded]
    failing = first_bad or items[-1]
    result: dict[str, Any] = {
        "status": out["status"], "symptom": out.get("symptom"), "culprits": [],
        "baseline": out.get("baseline"),
        "failing": full_summary(b.results[failing]) if failing in b.results else None,
        "trials": b.trials, "cached_trials": b.cached, "wall_s": round(time.monotonic() - started, 3),
        "run_dir": _shown_path(run_dir), "first_bad_commit": None,
        "first_bad_version": first_bad, "last_good_version": last_good,
        "candidates": out.get("candidates", []), "good": items[0], "bad": items[-1],
        "versions": table, "follows": lib_follows, "follows_note": follows_note,
        "keras": "legacy" if legacy_keras else "default",
        "tf_dist": env_trial.tf_dist if env_trial else tf_dist,
        "environments": {v: (e if isinstance(e, str) else e.name) for v, e in (env_trial.envs.items()
                                                                                 if env_trial else ())},
        "project": str(root), "settings": settings.to_dict(),
        "trials_table": [{**row, "enabled": [], "role": f"tf {row['version']}",
                          "verdict": b.rows[row["version"]].verdict if row["version"] in b.rows else None}
                         for row in b.table],
        "notes": notes,
        "error": out.get("message") if out["status"] != "found" else None,
    }
    if "message" in out:
        result["message"] = out["message"]
    if first_bad and then_features is not None:
        start = env_trial.start_for(first_bad) if env_trial else FeatureStart(root, first_bad, None)
        result["then_features"] = then_features(start)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    return result


def _search(b: _Run, items: list[str], symptom: Verdict | None) -> dict[str, Any]:
    good_v, bad_v = items[0], items[-1]
    g = b.run(good_v)
    if isinstance(g, str):
        b.record(good_v, Mark.SKIP, Verdict.UNTESTABLE, note=g)
        return {"status": "error", "symptom": symptom and symptom.value,
                "message": f"the good end {good_v} cannot be tried: {g}"}
    g_shows = b.shows(g, None)
    baseline = full_summary(g)
    if (symptom is not None and symptom in g_shows) or g_shows & STOPPERS:
        b.record(good_v, Mark.BAD, symptom if symptom in g_shows else _first(g_shows), g_shows, g.error)
        what = ", ".join(v.value for v in SYMPTOM_ORDER if v in g_shows)
        return {"status": "baseline-fails", "symptom": symptom and symptom.value, "baseline": baseline,
                "message": f"the good end {good_v} already shows {what}" + (f": {g.error}" if g.error else "")
                + "; give an older --good (or list older releases)"}
    x = b.run(bad_v)
    if isinstance(x, str):
        b.record(good_v, Mark.GOOD, Verdict.OK, g_shows)
        b.record(bad_v, Mark.SKIP, Verdict.UNTESTABLE, note=x)
        return {"status": "error", "symptom": symptom and symptom.value, "baseline": baseline,
                "message": f"the bad end {bad_v} cannot be tried: {x}"}
    x_shows = b.shows(x, g)
    target = symptom or _first(x_shows)
    if target is Verdict.MISMATCH:
        g2 = b.run(good_v, repeat=1)
        if not isinstance(g2, str):
            from tfrepro.trials.classify import measure_noise

            b.noise = measure_noise(g, g2)
        x_shows = b.shows(x, g)
        target = symptom or _first(x_shows)
    if target in (None, Verdict.SLOWDOWN) and b.symptoms.slowdown and b.slower(good_v, bad_v)[0]:
        target, x_shows = Verdict.SLOWDOWN, x_shows | {Verdict.SLOWDOWN}
    b.record(good_v, Mark.GOOD, Verdict.OK, g_shows)
    if target is None or target not in x_shows:
        what = target.value if target else "any symptom (nan, crash, timeout, mismatch, slowdown)"
        shows = ", ".join(v.value for v in SYMPTOM_ORDER if v in x_shows) or "nothing"
        b.record(bad_v, Mark.GOOD, _first(x_shows) or Verdict.OK, x_shows)
        return {"status": "error", "symptom": target and target.value, "baseline": baseline,
                "message": f"the bad end {bad_v} does not show {what} against the good end {good_v} "
                f"(it shows {shows})"}
    b.record(bad_v, Mark.BAD, target, x_shows, x.error if target is Verdict.CRASH else None)
    b.on_event("symptom", {"symptom": target.value})

    def test(v: str) -> Mark:
        if v in (good_v, bad_v):
            return Mark.GOOD if v == good_v else Mark.BAD
        r = b.run(v)
        if isinstance(r, str):
            return b.record(v, Mark.SKIP, Verdict.UNTESTABLE, note=r)
        shown = b.shows(r, g)
        if target is Verdict.SLOWDOWN and not shown & STOPPERS:
            slower, why = b.slower(good_v, v)
            if why:
                return b.record(v, Mark.SKIP, Verdict.UNTESTABLE, shown, why)
            shown = shown | {Verdict.SLOWDOWN} if slower else shown
        mark, reason = judge(shown, target, error=r.error, bad_error=x.error)
        note = reason or (r.error if mark is Mark.BAD and target is Verdict.CRASH else None)
        return b.record(v, mark, {Mark.BAD: target, Mark.GOOD: Verdict.OK, Mark.SKIP: Verdict.UNTESTABLE}[mark],
                        shown, note)

    found = bisect_range(items, test)
    out: dict[str, Any] = {"status": "found", "symptom": target.value, "baseline": baseline}
    if found.status == "found":
        out["first_bad_version"] = found.first_bad
    else:  # skips hide which candidate is the first bad one
        out["candidates"] = list(found.candidates)
        out["last_good_version"] = items[items.index(found.candidates[0]) - 1]
        out["status"] = "ambiguous"
        out["message"] = (f"{len(found.candidates)} candidate releases ({', '.join(found.candidates)}): "
                          "the untestable ones among them hide which one is the first bad one")
    return out
