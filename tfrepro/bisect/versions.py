"""Version bisection: the first TensorFlow release whose trial shows the symptom (EDGE).

`tfrepro bisect --tf-versions A,B,... [PATH]` runs the project *as written*
(as commit mode does) once per tried release, each in its own cached
environment (`trials/envs.py`). The search is `rangesearch.bisect_range`
over the releases ordered from the good end to the bad end; the trial for a
release is an injected `VersionTrial`, so the whole search is tested with fakes.

Invariants (the ends, the symptom, skips: as in every range mode, `ranges.py`):
- The good end is `--good`, else the oldest listed release; the bad end
  `--bad`, else the newest.
- A release whose environment cannot be built is a skip with its reason.
- Every trial goes through the trial cache, keyed by the versions inside its
  environment (not the driver's), so a rerun is cache hits.
- The result fills `first_bad_version` and `last_good_version` (Contract 4),
  a per-release table (version, verdict, symptom, note) and `follows`: whether
  the change comes with the Keras 2 -> Keras 3 switch ("keras") or not
  ("tensorflow").
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from tfrepro.bisect.commits import as_written, range_settings
from tfrepro.bisect.events import BisectEvents, BisectOptions, TrialLog
from tfrepro.bisect.ranges import Point, RangeRun, Source, with_evidence
from tfrepro.errors import UserError
from tfrepro.project import Project, locate
from tfrepro.settings import TrialSettings
from tfrepro.trials.executors import LocalExecutor
from tfrepro.trials.state import StateDir
from tfrepro.trials.trial import Trial, TrialOptions
from tfrepro.trials.values import RunResult, TrialResult, evidence_doc
from tfrepro.verdicts import SYMPTOM_ORDER

# One trial of the project under a release's environment, or why that release
# cannot be tried (its environment failed to build).
VersionTrial = Callable[[str, TrialSettings], "TrialResult | str"]
OnLine = Callable[[str], None] | None  # gets the environment builds' output
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
        """`run_trial` in this release's environment, called as an injected
        runner is (`LocalExecutor._run`): the release's python, versions and
        env, where the request's `TrialOptions` leave them None."""
        from tfrepro.trials import runner

        release = {"python": self.python, "versions": self.versions or None, "env": self.env or None}

        def run(project: Any, enabled: Iterable[str], settings: TrialSettings, how: TrialOptions) -> TrialResult:
            bound = {name: value for name, value in release.items() if getattr(how, name) is None}
            return runner.run_trial(project, enabled, settings, replace(how, **bound))

        return run


class FeatureAnswer(TypedDict, total=False):
    """`--then-features`: the feature bisection's answer inside the first bad release."""

    status: str
    symptom: str | None
    culprits: list[str]
    trials: int
    run_dir: str | None
    error: str | None


FeatureHook = Callable[[FeatureStart], FeatureAnswer]


def uses_tf_keras(project: Project) -> bool:
    """Whether the project's Python files reach Keras through TensorFlow
    (`tf.keras`, `tensorflow.keras`): only then does TF_USE_LEGACY_KERAS matter."""
    for rel in (r for r in project.files if r.endswith(".py")):
        with contextlib.suppress(OSError):
            if _TF_KERAS_USE.search((project.root / rel).read_text(encoding="utf-8", errors="replace")):
                return True
    return False


class VersionSource(Source):
    """A release is tried by running the project as written in that release's
    environment (built, or reused from the user cache, on first use)."""

    noun = "release"
    key = "version"
    older = "give an older --good (or list older releases)"

    def __init__(
        self,
        root: Path,
        state: StateDir,
        releases: Releases,
        use_cache: bool,
        *,
        on_line: OnLine,
        trial: VersionTrial | None,
    ) -> None:
        from tfrepro.trials.envs import EnvStore, detect_tf_dist

        self.root, self.state, self.use_cache, self.trial = root, state, use_cache, trial
        self.store = EnvStore()  # the user cache of environments
        self.tf_dist = releases.tf_dist or (detect_tf_dist() if trial is None else "tensorflow-cpu")
        self.legacy_keras = releases.legacy_keras
        self.extra_env = {"TF_USE_LEGACY_KERAS": "1"} if self.legacy_keras else {}  # what a trial's environment adds
        self.on_line = on_line or (lambda line: None)
        self.envs: dict[str, Any] = {}  # version -> Env, or the reason it failed
        self.project = as_written(root)

    def role(self, point: Point) -> str:
        return f"tf {point.label}"

    def env_for(self, version: str) -> Any:
        from tfrepro.trials.envs import EnvError, spec_for

        if version not in self.envs:
            spec = spec_for(version, self.root, tf_dist=self.tf_dist, legacy_keras=self.legacy_keras)
            try:
                self.envs[version] = self.store.ensure(spec, self.on_line)
            except EnvError as e:
                self.envs[version] = f"no environment for {self.tf_dist} {version}: {e}"
        return self.envs[version]

    def request(self, point: Point, settings: TrialSettings) -> Trial | str:
        how = TrialOptions(label=self.role(point), use_cache=self.use_cache, state_dir=self.state.path)
        base = Trial((), settings, how, self.project)
        if self.trial is not None:  # tests: the injected trial stands in for environment and run
            got = self.trial(point.label, settings)
            return got if isinstance(got, str) else replace(base, given=got)
        env = self.env_for(point.label)
        if isinstance(env, str):
            return env
        how = replace(how, env=self.extra_env or None, python=str(env.python), versions=env.versions)
        return replace(base, how=how)


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

    def to_dict(self) -> dict[str, object]:
        """The fields in order, `symptom` (the first shown) before `shows`."""
        head = {"version": self.version, "verdict": self.verdict, "symptom": self.shows[0] if self.shows else None}
        return {**head, **asdict(self), "shows": list(self.shows)}


def order_range(versions: Sequence[str], good: str | None, bad: str | None) -> list[str]:
    """The releases from the good end to the bad end (descending when the good
    end is the newer one: "which release fixed it")."""
    from tfrepro.trials.releases import sort_versions

    listed = sort_versions([*versions, *(v for v in (good, bad) if v)])
    g, b = good or listed[0], bad or listed[-1]
    if g == b:
        raise UserError(
            f"the good and the bad end are the same release ({g})",
            hint="give two different releases, e.g. --good 2.15.1 --bad 2.16.2",
        )
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
        return "keras", (
            f"the behaviour changes with Keras {ka} -> {kb} ({a.version}: {a.keras_lib or 'keras'} "
            f"{a.keras}, {b.version}: {b.keras_lib or 'keras'} {b.keras}); --keras legacy runs tf.keras "
            "as tf_keras (Keras 2) to tell whether TensorFlow itself changed"
        )
    return "tensorflow", f"the same Keras major on both sides ({a.keras_lib or 'keras'} {ka} -> {kb})"


def _rows(run: RangeRun) -> dict[str, Row]:
    """One row per judged release, with the Keras it ran."""
    rows: dict[str, Row] = {}
    for t in run.tried:
        r = run.first.get(t.label)
        v = (r.extra.get("versions") or {}) if r else {}
        lib = r.extra.get("keras") if r else None
        keras = v.get("tf_keras") if lib == "tf_keras" else v.get("keras")
        rows[t.label] = Row(
            t.label,
            t.verdict.value,
            tuple(s.value for s in t.shows if s in SYMPTOM_ORDER),
            t.reason,
            v.get("tensorflow") or (r and r.tf_version),
            keras or (r and r.keras_version),
            lib,
        )
    return rows


def _table(
    rows: dict[str, Row], versions: Sequence[str], items: list[str], excluded: Sequence[tuple[str, str]]
) -> list[Row]:
    """Every listed release in order (those not tried say why), then the excluded ones."""
    from tfrepro.trials.releases import sort_versions

    table = [
        rows.get(v)
        or Row(v, "not tried", note="not needed by the bisection" if v in items else "outside the good..bad range")
        for v in sort_versions([*versions, items[0], items[-1]])
    ]
    return table + [Row(v, "excluded", note=why) for v, why in excluded]


@dataclass(frozen=True)
class Releases:
    """Which releases a version bisection tries and how: the ends (None: the
    oldest and the newest listed), `--keras legacy`, the distribution (None:
    the one installed here), the releases left out with their reason, and
    the `--then-features` hook (called with the first bad release's
    `FeatureStart`; its answer kept as `then_features`)."""

    good: str | None = None
    bad: str | None = None
    legacy_keras: bool = False
    tf_dist: str | None = None
    excluded: tuple[tuple[str, str], ...] = ()
    then_features: FeatureHook | None = field(default=None, compare=False)


def bisect_versions(
    path: str | Path,
    versions: Sequence[str],
    options: BisectOptions = BisectOptions(),
    releases: Releases = Releases(),
    *,
    trial: VersionTrial | None = None,
    events: BisectEvents | None = None,
    on_line: OnLine = None,
) -> RunResult:
    """Find the first release (from the good end to the bad end) whose trial
    shows the symptom. Returns the RunResult (also in `<run_dir>/result.json`).
    `trial` (tests) stands in for building the environment and running;
    `on_line` gets the environment builds' output."""
    started = time.monotonic()
    root, entry = locate(path)  # as feature and commit mode find it
    items = order_range(versions, releases.good, releases.bad)
    settings, symptoms = range_settings(root, entry, options)
    state = StateDir.of(root)
    source = VersionSource(root, state, releases, options.use_cache, on_line=on_line, trial=trial)
    executor = LocalExecutor(1, devices=[] if trial is not None else None)
    points = [Point(v, "") for v in items]
    run = RangeRun(points, source, executor, settings, symptoms, TrialLog(state, started=started), events, options)
    run.events.phase(f"bisecting {len(items)} {source.tf_dist} releases: good {items[0]} .. bad {items[-1]}")
    answer, first_bad = run.answer(options.symptom)
    candidates = [p.label for p in answer.candidates]
    # the release before the first bad one (or before the first candidate)
    after = first_bad.label if first_bad else (candidates[0] if candidates else None)
    last_good = items[items.index(after) - 1] if after else None
    rows = _rows(run)
    lib_follows, follows_note = follows(rows, last_good, first_bad.label if first_bad else None)
    notes = []
    if releases.legacy_keras and not uses_tf_keras(source.project):
        notes.append("--keras legacy: the project does not use tf.keras, so TF_USE_LEGACY_KERAS changes nothing")
    then = None
    if first_bad and releases.then_features is not None:  # inside the first bad release's environment
        env = source.env_for(first_bad.label) if source.trial is None else "injected trial"
        python, pinned = (None, {}) if isinstance(env, str) else (str(env.python), dict(env.versions))
        then = releases.then_features(FeatureStart(source.root, first_bad.label, python, pinned, source.extra_env))
    fields = VersionFields(
        good=items[0],
        bad=items[-1],
        versions=tuple(_table(rows, versions, items, releases.excluded)),
        follows=lib_follows,
        follows_note=follows_note,
        keras="legacy" if releases.legacy_keras else "default",
        tf_dist=source.tf_dist,
        notes=tuple(notes),
        project=str(source.root),
        settings=run.settings,
        environments={v: (e if isinstance(e, str) else e.name) for v, e in source.envs.items()},
        then_features=then,
    )
    answer = replace(
        answer,
        first_bad_version=first_bad.label if first_bad else None,
        last_good_version=last_good,
        candidates=tuple(candidates),
    )
    return with_evidence(answer, run, first_bad, fields)


@dataclass(frozen=True)
class VersionFields:
    """Version mode's keys of the result document: the ends, the table of
    releases, what the change follows (Keras or TensorFlow), the
    environments, --then-features' answer."""

    good: str
    bad: str
    versions: tuple[Row, ...]
    follows: str | None
    follows_note: str | None
    keras: str
    tf_dist: str
    notes: tuple[str, ...]
    project: str
    settings: TrialSettings
    environments: Mapping[str, str]
    then_features: FeatureAnswer | None = None

    def to_dict(self) -> dict[str, object]:
        return evidence_doc(self, frozenset({"then_features"}))


def feature_hook(
    options: BisectOptions, only: list[str] | None, skip: list[str] | None, events: BisectEvents | None
) -> FeatureHook:
    """`--then-features`: a feature bisection of the project inside the first
    bad release's environment (--steps, the cache and --timing-budget of
    `options`; the features `only`/`skip` choose, None: not given); its
    answer goes under `then_features`."""

    def hook(start: FeatureStart) -> FeatureAnswer:
        from tfrepro.bisect.engine import bisect

        project = Project.load(start.project_root, only=only, skip=skip)
        if events is not None:
            events.phase(f"bisecting the features inside tensorflow {start.version}")
        inside = BisectOptions(
            steps=options.steps, use_cache=options.use_cache, timing_budget_s=options.timing_budget_s
        )
        doc = bisect(project, inside, runner=start.runner(), events=events).to_dict()
        return FeatureAnswer(**{k: doc[k] for k in FeatureAnswer.__annotations__})  # its keys of the answer

    return hook
