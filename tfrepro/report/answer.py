"""The run's answer as the report writes and reads it: report.json's
document as frozen values (`Report`: bundle.py `document` builds it, `Report.json`
writes it, bundle.py reads the written, scrubbed document back with
`Report.of`); what others wrote (trial summaries, environment facts,
timing) kept as written and read as the writers' own values (a trial as
`TrialResult.from_dict` reads it, a timing comparison as its `TimingRecord`)
or as `Env`; result.json's trials table as TypedDicts. A field holds the JSON
value as written, or the default its reader falls back to where the key is
absent; an empty or absent sub-document is None where a field allows it,
else an all-default value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, TypeVar, get_args, get_type_hints

from tfrepro.report.records import RuntimeSettings
from tfrepro.report.scan import Setup
from tfrepro.settings import SymptomSettings
from tfrepro.trials.slowdown import TimingRecord
from tfrepro.trials.values import TrialResult, TrialRow

T = TypeVar("T")


def of(cls: type[T], d: dict[str, Any] | None) -> T | None:
    """`cls` from the JSON object's keys of the same names (a field typed as
    another of these values from its sub-object); None for an empty or absent object."""
    if not d:
        return None
    hints = get_type_hints(cls)
    return cls(**{f.name: _value(hints[f.name], d[f.name]) for f in fields(cls) if f.name in d})


def _value(hint: Any, v: Any) -> Any:
    kinds = get_args(hint) or (hint,)
    sub = next((k for k in kinds if is_dataclass(k)), None)
    if sub is None or isinstance(v, sub):
        return v
    return of(sub, v) if type(None) in kinds else of(sub, v) or sub()


def timed(doc: Reproduction | Evidence) -> TimingRecord:
    """The timing comparison `doc` holds as written (`timing`, a TimingOutcome.to_dict)."""
    return of(TimingRecord, doc.timing) or TimingRecord()


@dataclass(frozen=True)
class Reproduction:
    """report.json's `reproduction`: the report's re-run of repro.py on its
    own (rerun.py `reproduce`), written with `asdict`. `reproduced` is None
    when the re-run could not decide (e.g. no trial machinery, a timing
    comparison inconclusive at its budget). `candidate` and `reference` are
    the re-run's trials as written (trials/values.py `TrialResult.to_dict`),
    `timing` its timing comparison (`TimingOutcome.to_dict`); `trial` and
    `timed` (above) read them back."""

    symptom: str | None = None
    reproduced: bool | None = None
    detail: str | None = None
    verdict: str | None = None
    candidate: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None

    @property
    def trial(self) -> TrialResult | None:
        """The re-run of repro.py."""
        return TrialResult.from_dict(self.candidate) if self.candidate else None


@dataclass(frozen=True)
class NightlyRun:
    """report.json's `nightly` (written with `asdict`): the nightly build
    tried (rerun.py `on_nightly`, or a version bisect's trial of one),
    whether the repro showed the symptom there, what it saw."""

    version: str = "tf-nightly"
    reproduced: bool | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Repro:
    """report.json's `repro`: the exported repro (bundle.py `document`) and its trim
    (rerun.py `with_data`: `trimmed`, and what the trim did or why it was not kept)."""

    entry: str = "repro.py"
    files: list[str] | None = None
    code: str | None = None
    extra_imports: list[str] | None = None  # top-level packages beyond TensorFlow and NumPy
    reference: str = "reference.py"
    diff: str | None = None
    command: str = "python repro.py"
    trimmed: bool | None = None
    trim: dict[str, Any] | None = None


@dataclass(frozen=True)
class Evidence:
    """What the bisect measured besides the answer: report.json's `evidence`,
    the run's result fields of these names as result.json has them (its
    `timing` a `TimingOutcome.to_dict`, read through `timed`) and the
    replicas the trials ran with."""

    trials: int | None = None
    wall_s: float | None = None
    ablation: dict[str, str] | None = None
    trials_table: list[TrialRow] | None = None
    flaky: bool | None = None
    reproduction_rate: float | None = None
    noise: float | None = None
    timing: dict[str, Any] | None = None
    compile_differs: list[dict[str, Any]] | None = None
    replicas: int | None = None


@dataclass(frozen=True)
class Env:
    """The environment facts as the report reads them (inside/envprobe.py
    writes them; `envprobe.py --runtime` adds `runtime`): versions, devices, CUDA."""

    tf_version: str | None = None
    tf_git_version: str | None = None
    tf_dist: dict[str, str] | None = None
    keras_version: str | None = None
    keras_dist: dict[str, str] | None = None
    tf_keras_dist: dict[str, str] | None = None
    numpy_dist: dict[str, str] | None = None
    python: str | None = None
    os: str | None = None
    platform: str | None = None
    machine: str | None = None
    cpu_count: int | None = None
    devices: list[dict[str, str]] | None = None
    gpus: list[dict[str, str]] | None = None
    smi_gpus: list[dict[str, str]] | None = None
    nvidia_driver: str | None = None
    build_info: dict[str, Any] | None = None
    cuda_wheels: dict[str, str] | None = None
    ld_library_path: str | None = None
    runtime: dict[str, Any] | None = None  # precision policy, XLA, determinism as a fresh process starts
    tf_error: str | None = None
    probe_error: str | None = None

    @property
    def tensorflow(self) -> str | None:
        """TensorFlow's version: as it said, else its distribution's."""
        return self.tf_version or (self.tf_dist or {}).get("version")

    @property
    def keras(self) -> str | None:
        """Keras's version: as it said, else its distribution's."""
        return self.keras_version or (self.keras_dist or {}).get("version")


@dataclass(frozen=True)
class Localization:
    """report.json's `localization` (localize.py `localize`): the first
    non-finite value check_numerics saw. `found` False means the run
    finished (or failed) without check_numerics firing; `note` says why.
    Written with its `headline` besides its fields."""

    found: bool = False
    op_type: str | None = None
    node: str | None = None  # full graph node name, CheckNumerics suffix removed
    scope: str | None = None  # name scope of the node (layers, outer to inner)
    layer: str | None = None  # the layer name, matched against the model's layers
    layer_class: str | None = None
    kind: str | None = None  # "NaN", "+Inf", ...
    dtype: str | None = None
    shape: str | None = None
    input_tensor: str | None = None
    backward: bool = False  # the op belongs to the gradient computation
    file: str | None = None  # relative to the repro directory
    line: int | None = None
    code: str | None = None  # the source line
    function: str | None = None  # Class.method / function containing the line
    note: str = ""
    excerpt: str = ""  # the part of the error a maintainer wants to read
    settings: RuntimeSettings = field(default_factory=lambda: RuntimeSettings())

    def headline(self) -> str:
        """The finding in one clause (ISSUE.md, the CLI's summary)."""
        if not self.found:
            return self.note or "check_numerics did not fire"
        where = f"layer `{self.layer}`" if self.layer else (f"scope `{self.scope}`" if self.scope else "")
        if self.layer_class:
            where += f" ({self.layer_class})" if where else f"`{self.layer_class}`"
        text = f"first non-finite value ({self.kind or 'NaN/Inf'}) produced by op `{self.op_type}`"
        if where:
            text += f" in {where}"
        if self.backward:
            text += ", in the backward pass"
        if self.file and self.line:
            text += f" at {self.file}:{self.line}"
            if self.function:
                text += f" in `{self.function}`"
        return text


@dataclass(frozen=True)
class Report:
    """report.json: everything ISSUE.md says, as data (the module says who
    builds, writes and reads it). The trials (`baseline`, `failing`,
    `culprit_trial`, `reference_trial`) are result.json's trial summaries and
    `environment` the probe's facts, as written there: `base`, `culprit`,
    `reference`, `candidate` and `env` read them back."""

    tfrepro_version: str = ""
    run_id: str = "?"
    run_dir: str | None = None
    project: str | None = None
    status: str | None = None
    symptom: str | None = None
    culprits: list[str] | None = None
    culprit_config: list[str] | None = None
    reference_config: list[str] | None = None
    first_bad_commit: str | None = None
    commit: dict[str, str] | None = None
    follows: str | None = None
    nightly: NightlyRun | None = None
    features: dict[str, dict[str, Any]] | None = None  # name: description, affects_loss
    settings: dict[str, Any] | None = None
    symptom_settings: SymptomSettings = SymptomSettings()  # the run's [symptoms] thresholds
    baseline: dict[str, Any] | None = None
    failing: dict[str, Any] | None = None
    culprit_trial: dict[str, Any] | None = None
    evidence: Evidence = Evidence()
    environment: dict[str, Any] | None = None
    env_vars: dict[str, str] | None = None
    redacted_env_count: int | None = None  # how many, never their names
    setup: Setup = Setup()  # what the script sets up (scan.py)
    reproduction: Reproduction | None = None
    localization: Localization | None = None
    repro: Repro = Repro()
    artifacts: dict[str, str] | None = None
    reference_trial: dict[str, Any] | None = None  # a mismatch's re-run of reference.py: written only then
    data: dict[str, Any] | None = None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Report:
        """The report document `doc` (report.json's dict) as typed values."""
        return of(cls, doc) or cls()

    def json(self) -> dict[str, Any]:
        """report.json's document: every field, the localisation's headline,
        `reference_trial` only where there is one."""
        doc = asdict(self)
        if self.localization:
            doc["localization"]["headline"] = self.localization.headline()
        if self.reference_trial is None:
            del doc["reference_trial"]
        return doc

    @property
    def rerun(self) -> Reproduction:
        return self.reproduction or Reproduction()

    @property
    def base(self) -> TrialResult:
        """The baseline trial (all features off)."""
        return TrialResult.from_dict(self.baseline or {})

    @property
    def culprit(self) -> TrialResult | None:
        """The culprit configuration's trial."""
        return TrialResult.from_dict(self.culprit_trial) if self.culprit_trial else None

    @property
    def reference(self) -> TrialResult | None:
        """A mismatch's re-run of reference.py."""
        return TrialResult.from_dict(self.reference_trial) if self.reference_trial else None

    @property
    def candidate(self) -> TrialResult:
        """The trial showing the symptom: the culprit configuration's, else the failing one's."""
        return self.culprit or TrialResult.from_dict(self.failing or {})

    @property
    def env(self) -> Env:
        """The environment facts."""
        return of(Env, self.environment) or Env()
