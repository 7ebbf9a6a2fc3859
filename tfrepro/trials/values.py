"""Values that cross layers: trial results, the run result (verdicts: `tfrepro.verdicts`,
settings: `tfrepro.settings`).

Frozen dataclasses, JSON round-trippable. The trial runner produces
`TrialResult`s, the classifier (`classify.py`) turns them into `Verdict`s, and
neither knows how the other works.

JSON encoding: a non-finite loss is written as `null` (strict JSON has no NaN);
`first_nonfinite_step` says where the first one was.
A stored TrialResult (a cache entry, a trial's result.json) is read back by
`load_result`: `[]`, a truncated file, a field of the wrong type, an entry
copied under another key are a miss, never an exception.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TypedDict

from tfrepro.catalog import CostFound
from tfrepro.settings import WARMUP_STEPS
from tfrepro.verdicts import Verdict

NUM = (int, float)
# TrialResult's list fields as JSON holds them: the types their items may have
# (another: not a stored result, `load_result`) and how `from_dict` reads one.
LISTS: dict[str, tuple[tuple[type, ...], Callable[[Any], Any]]] = {
    "enabled": ((str,), str),
    "losses": ((*NUM, type(None)), lambda x: float("nan") if x is None else float(x)),  # non-finite: null
    "step_times": (NUM, float),
    "nonfinite_weights": ((str,), str),
    "rss_per_step": ((int,), int),
    "compile_modes": ((dict,), dict),
    "devices": ((str,), str),
}
_NONE = type(None)
# The type of every scalar field of a stored TrialResult (absent fields take their default).
_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("crashed", "timed_out", "could_not_run", "cached"), (bool,)),
    "weights_finite": (bool, _NONE),
    **dict.fromkeys(("first_nonfinite_step", "exit_code", "peak_rss_bytes", "device_peak_bytes"), (int, _NONE)),
    "steps_run": (int,),
    "wall_s": NUM,
    "growth_per_step": (*NUM, _NONE),
    **dict.fromkeys(("label", "key", "mode"), (str,)),
    **dict.fromkeys(("error", "log_dir", "tf_version", "keras_version"), (str, _NONE)),
    "extra": (dict, _NONE),
}


@dataclass(frozen=True)
class TrialResult:
    """The measured facts of one trial; no judgement (that is `classify.py`).

    Invariants: `losses[i]` is the loss of step i+1; the list stops at the first
    non-finite loss (included) or at `steps`. `step_times[i]` is the wall time
    of step i+1 in seconds. `crashed` means the training raised or the process
    exited non-zero without having been killed for a timeout.
    """

    enabled: tuple[str, ...] = ()
    label: str = ""  # e.g. a commit sha in commit mode; "" for feature trials
    losses: tuple[float, ...] = ()
    step_times: tuple[float, ...] = ()
    first_nonfinite_step: int | None = None
    weights_finite: bool | None = None
    nonfinite_weights: tuple[str, ...] = ()  # names of variables holding NaN/Inf
    crashed: bool = False
    timed_out: bool = False
    # The executor lost the trial (a dead worker, twice): no measurement at
    # all, never cached, never a verdict on the feature (UNTESTABLE).
    could_not_run: bool = False
    exit_code: int | None = None
    error: str | None = None  # the last traceback line of a crash
    mode: str = "none"  # "fit" | "loop" | "none" (no training was seen)
    steps_run: int = 0
    wall_s: float = 0.0
    key: str = ""  # cache key
    cached: bool = False
    log_dir: str | None = None
    tf_version: str | None = None
    keras_version: str | None = None
    # Memory (Contract 3), measured by the harness: the largest RSS seen, RSS
    # after each step (bytes; a compact series, see `inside/memory.py`), the
    # device's peak where there is a device, and the robust growth slope over
    # the steady steps (bytes/step). None / () when not measured.
    peak_rss_bytes: int | None = None
    rss_per_step: tuple[int, ...] = ()
    device_peak_bytes: int | None = None
    growth_per_step: float | None = None
    # What the script fed training (inside/harness_data.py): `sources` (the
    # calls that read data files, file:line) and `fits` (element spec,
    # batches per epoch, per-feature statistics). {} when not recorded.
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # What actually ran (Contract 3; inside/devices.py): each compile/fit's
    # resolved compile mode ({"call", "jit_compile", ...}), the replicas in
    # sync, the precision policy, the devices. None / () when not seen.
    compile_modes: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)
    replicas_in_sync: int | None = None
    precision_policy: str | None = None
    devices: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def nonfinite(self) -> bool:
        return self.first_nonfinite_step is not None or self.weights_finite is False

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def error_detail(self) -> str | None:
        """A crash's traceback, as the harness recorded it in `extra`."""
        return self.extra.get("error_detail")

    def steady_step_times(self) -> tuple[float, ...]:
        """Step times without the warm-up steps (empty when too short). A
        timing trial that timed chosen calls (fit#2...) lists their steady
        steps in `extra["timed_ranges"]`: those, each call's warm-up out."""
        ranges = self.extra.get("timed_ranges")
        if ranges is not None:
            return tuple(t for a, b in ranges for t in self.step_times[a:b])
        return self.step_times[WARMUP_STEPS:]

    def median_step_time(self) -> float | None:
        steady = self.steady_step_times()
        return statistics.median(steady) if steady else None

    def to_dict(self) -> dict[str, Any]:
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        d["losses"] = [x if math.isfinite(x) else None for x in self.losses]  # strict JSON: null
        d["median_step_time"] = self.median_step_time()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrialResult":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for name, (_, read) in LISTS.items():
            kw[name] = tuple(read(x) for x in kw.get(name) or ())
        kw["extra"] = dict(kw.get("extra") or {})
        kw["data"] = dict(kw.get("data") or {})
        return cls(**kw)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file at `path`, or None (missing, unreadable, not an object)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_result(path: Path, key: str | None = None) -> TrialResult | None:
    """The TrialResult stored at `path`, or None: missing, unreadable, not a
    well-formed result (every known field of its type: not a truncated or
    hand-edited file), or (given `key`) stored for another key."""
    data = read_json(path)
    if data is None or (key is not None and data.get("key", key) != key):
        return None
    for name, types in _RESULT_TYPES.items():
        if name in data and (not isinstance(data[name], types) or (bool not in types and type(data[name]) is bool)):
            return None
    for name, (types, _) in LISTS.items():  # their items' types: values.LISTS
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(x, types) and type(x) is not bool for x in value):
            return None
    try:
        return TrialResult.from_dict(data)
    except (TypeError, ValueError, AttributeError, KeyError):
        return None


def summary(result: TrialResult) -> dict[str, Any]:
    """The trial summary printed by `tfrepro run --json` (and a result's
    `baseline`): every field of the result plus the derived numbers a reader
    looks for first."""
    d = result.to_dict()
    # `losses` holds null for a non-finite loss already
    d["first_loss"], d["last_loss"] = (d["losses"][0], d["losses"][-1]) if d["losses"] else (None, None)
    d["nonfinite"] = result.nonfinite
    return d


class TrialRow(TypedDict, total=False):
    """One trial in the result's trials table (the evidence's `trials_table`); a
    commit or version trial names its own (`sha`, `version`). The report
    reads it back with this type too."""

    enabled: list[str]
    verdict: str | None
    summary: str  # its summary.json, relative to the run dir
    cached: bool
    role: str
    repeat: int
    key: str
    sha: str
    version: str


@dataclass(frozen=True)
class AlsoSeen:
    """One symptom seen besides the one hunted (Contract 4's `also_seen`):
    how to hunt it; for a possible slowdown, the failing / baseline fastest
    step ratio of untimed runs."""

    symptom: str
    hint: str
    ratio: float | None = None

    def to_dict(self) -> dict[str, str | float | bool]:
        if self.ratio is None:
            return {"symptom": self.symptom, "hint": self.hint}
        return {"symptom": self.symptom, "ratio": self.ratio, "possible": True, "hint": self.hint}


class Status(str, Enum):
    """The outcome of a bisection (Contract 4), and its exit code."""

    FOUND = "found"
    NONE = "none"  # the failing configuration (bad end) is healthy
    FLAKY = "flaky"  # the symptom does not reproduce reliably: no culprit named
    AMBIGUOUS = "ambiguous"  # commit/version mode: skips hide the first bad one
    BASELINE_FAILS = "baseline-fails"
    ERROR = "error"
    # Nothing could be measured (no training step, no step timed): `reason`
    # says why and the way out. Never "healthy" (that is NONE).
    UNTESTABLE = "untestable"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


_EXIT_CODES = {
    Status.FOUND: 0,
    Status.NONE: 3,
    Status.FLAKY: 4,
    Status.AMBIGUOUS: 4,
    Status.BASELINE_FAILS: 1,
    Status.ERROR: 1,
    Status.UNTESTABLE: 5,
}


class Evidence(Protocol):
    """What a mode's trials showed beyond the typed answer: a frozen value of
    the mode that wrote it (`bisect/result_doc.FeatureEvidence`,
    `bisect/ranges.RangeEvidence`), turned into the result document's other
    keys only at the state-dir boundary."""

    def to_dict(self) -> dict[str, object]: ...


def evidence_doc(value: object, optional: frozenset[str], skip: frozenset[str] = frozenset()) -> dict[str, object]:
    """A frozen evidence dataclass as the result document's keys, field by
    field in order: a TrialResult as its `summary`, an enum as its value, a value with `to_dict`
    as that, a tuple as a list; the `optional` fields left out when None,
    the `skip` ones always (the caller writes them)."""

    def plain(v: object) -> object:
        if isinstance(v, TrialResult):
            return summary(v)
        if isinstance(v, Enum):
            return v.value
        if hasattr(v, "to_dict"):
            return v.to_dict()
        return [plain(x) for x in v] if isinstance(v, tuple) else v

    return {
        f.name: plain(v)
        for f in fields(value)  # type: ignore[arg-type]
        if f.name not in skip and ((v := getattr(value, f.name)) is not None or f.name not in optional)
    }


@dataclass(frozen=True)
class RunResult:
    """One bisection's answer, shared by the feature, commit and version
    bisections, the display, the report, the benchmarks and the tests.

    `to_dict()` is Contract 4's JSON object: the typed fields below, then the
    mode's own evidence (trials table, ablation, tried commits, ...), which
    never overrides a typed field. Invariants: `culprits` is sorted; a `found`
    feature bisection names at least one culprit, a `found` commit bisection a
    `first_bad_commit`, a `found` version bisection a `first_bad_version`;
    `flaky` names no culprit (`suspects` instead).
    """

    status: Status
    symptom: Verdict | None = None
    culprits: tuple[str, ...] = ()
    baseline: TrialResult | None = None  # written as its `summary`
    trials: int = 0
    wall_s: float = 0.0
    run_dir: str | None = None
    first_bad_commit: str | None = None
    first_bad_version: str | None = None
    last_good_version: str | None = None
    flaky: bool = field(init=False, default=False)  # derived: `status` is FLAKY (`__post_init__`)
    reproduction_rate: float | None = None
    suspects: tuple[str, ...] = ()
    candidates: tuple[Any, ...] = ()
    also_seen: tuple[AlsoSeen, ...] = ()
    error: str | None = None
    reason: str | None = None  # untestable: why nothing could be measured, and the way out
    # The culprits' effect is a documented cost on this hardware (tfrepro/catalog.py);
    # `report` explains instead of drafting a bug.
    known_cost: CostFound | None = None
    evidence: Evidence | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flaky", self.status is Status.FLAKY)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def to_dict(self) -> dict[str, Any]:
        typed = evidence_doc(self, frozenset(), skip=frozenset({"evidence"}))
        return {
            **(self.evidence.to_dict() if self.evidence is not None else {}),
            **typed,
            "culprits": sorted(self.culprits),
        }
