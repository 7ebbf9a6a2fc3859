"""The schema of `tfrepro.toml` (Contract 2): strict pydantic models of its
tables, and their first error in tfrepro's words.

Imported only when a project has a `tfrepro.toml` (project.Manifest.parse):
a plain script's commands do not pay pydantic's import.
"""

from __future__ import annotations

import math
import os
import re
import typing
from typing import Annotated, ClassVar

import pydantic as pd
from pydantic_core import ErrorDetails

from tfrepro import features as fb
from tfrepro.settings import MAX_REPLICAS, StateSettings, SymptomSettings, TrialSettings

# Finite bounds of the numeric settings: nan, inf or 1e300 would silently
# switch a check off. (low, high, low is exclusive, and for the trial's and the
# symptoms' numbers the message and hint of a value below low)
_BOUNDS: dict[str, tuple[float, float, bool, tuple[str, str | None] | None]] = {
    **dict.fromkeys(("timeout_s", "budget_s"), (0.0, 7 * 24 * 3600.0, True, ("must be positive", None))),
    "slowdown": (1.0, 1000.0, True, ("is a ratio above 1", "e.g. slowdown = 1.25 for 25% slower")),
    "mismatch": (0.0, 100.0, False, ("must be >= 0", None)),
    "memory": (1.0, 1000.0, True, None),
    "keep_runs": (0, 100_000, False, None),
    "keep_trials": (0, 1_000_000, False, None),
    **dict.fromkeys(("copy_budget_mb", "keep_mb"), (0.0, 1e8, False, None)),
}
# pydantic's type errors, as the accepted TOML types they name ("int or str": a union's two)
_TYPE_NAMES = dict(int_type="int", float_type="int or float", string_type="str", bool_type="bool", list_type="list")


class _Bad(ValueError):
    """A value refused in tfrepro's words; `key`: the line to name for a table's error."""

    def __init__(self, msg: str, hint: str | None = None, key: str | None = None) -> None:
        super().__init__(msg)
        self.msg, self.hint, self.key = msg, hint, key


class _OutOfBounds(_Bad):
    """Reported before any type or value error of any table."""


class _Table(pd.BaseModel):
    """A table: strict types (a bool is no int), no unknown key, every key
    None until given (the settings' dataclasses hold the defaults)."""

    model_config = pd.ConfigDict(extra="forbid", strict=True)
    table: ClassVar[str] = ""

    @pd.field_validator("*", mode="before")
    @classmethod
    def _bounded(cls, value: object, info: pd.ValidationInfo) -> object:
        # before the type check (a wrong type is no bound's business), on the value as written
        key = info.field_name or ""
        if key in _BOUNDS and isinstance(value, (int, float)) and not isinstance(value, bool):
            lo, hi, lo_open, too_low = _BOUNDS[key]
            low = value <= lo if lo_open else value < lo
            if low and too_low:
                raise _Bad(f"[{cls.table}] {key} {too_low[0]}, not {value}", too_low[1])
            if not math.isfinite(value):
                raise _OutOfBounds(f"[{cls.table}] {key}: must be a finite number, not {value}")
            if value > hi or low:
                raise _OutOfBounds(
                    f"[{cls.table}] {key}: {value:g} is out of range: give a number "
                    f"{'above' if lo_open else 'of at least'} {lo:g} and at most {hi:g}"
                )
        return value


class _Trial(_Table):
    table = "trial"
    entry: str | None = None
    command: list[object] | None = None
    steps: int | None = None
    timeout_s: float | None = None
    budget_s: float | None = None
    repeats: int | None = None
    seed: int | None = None
    deterministic: bool | None = None
    gpus: int | str | None = None
    memory_limit_mb: int | None = None
    replicas: int | None = None

    @pd.field_validator("*")
    @classmethod
    def _value(cls, value: object, info: pd.ValidationInfo) -> object:
        """The range of one value of the right type."""
        key = info.field_name
        if key == "command" and (not value or not all(isinstance(x, str) for x in value)):
            raise _Bad(
                "[trial] command must be a non-empty list of strings", 'e.g. command = ["python", "train.py", "--fast"]'
            )
        # absolute (`/x.py`, `\\x.py`, `C:x.py`), or climbing out of the project (`../x.py`)
        if key == "entry" and (
            re.match(r"[/\\]|[A-Za-z]:", value) or os.path.normpath(value).split(os.sep)[0] == os.pardir
        ):
            raise _Bad(
                f"[trial] entry {value!r} is outside the project",
                "give the script's path relative to the project directory, e.g. "
                'entry = "train.py" (to run a script elsewhere: command = ["python", "/path/x.py"])',
            )
        if key in ("steps", "repeats") and value < 1:
            raise _Bad(f"[trial] {key} must be at least 1, not {value}")
        if key == "gpus" and (value != "all" if isinstance(value, str) else not 0 <= value <= 1024):
            raise _Bad(
                f'[trial] gpus is a count (0-1024) or "all", not {value!r}', 'e.g. gpus = 1, gpus = 4 or gpus = "all"'
            )
        if key == "seed" and not 0 <= value < 2**32:  # numpy's and PYTHONHASHSEED's range
            raise _Bad(f"[trial] seed must be between 0 and {2**32 - 1}, not {value}", "e.g. seed = 0")
        if key == "memory_limit_mb" and not 64 <= value <= 1 << 30:
            raise _Bad(f"[trial] memory_limit_mb must be between 64 and {1 << 30}, not {value}")
        if key == "replicas" and not 1 <= value <= MAX_REPLICAS:
            raise _Bad(
                f"[trial] replicas must be between 1 and {MAX_REPLICAS}, not {value}",
                "e.g. replicas = 2: one device split into 2 logical ones for MirroredStrategy",
            )
        return tuple(value) if key == "command" else value

    @pd.model_validator(mode="after")
    def _budget(self) -> _Trial:
        """`budget_s` (the failing configuration's run until its symptom) must
        end before the trial's `timeout_s` kills it; left out, it is the
        default or half of a shorter `timeout_s`."""
        if self.entry is not None and self.command is not None:
            raise _Bad("[trial] has both `entry` and `command`; keep one", key="command")
        timeout = TrialSettings.timeout_s if self.timeout_s is None else self.timeout_s
        if self.budget_s is None and TrialSettings.budget_s >= timeout:
            self.budget_s = timeout / 2
        elif self.budget_s is not None and self.budget_s >= timeout:
            raise _Bad(
                f"[trial] budget_s ({self.budget_s:g} s) must be less than timeout_s ({timeout:g} s)",
                f"e.g. budget_s = {timeout / 2:g}, or raise timeout_s",
                key="budget_s",
            )
        return self


def _table(name: str, settings: type) -> type[_Table]:
    """The table `[name]` of a settings dataclass: its keys and their types, each None until given."""
    keys = {k: (t | None, None) for k, t in typing.get_type_hints(settings).items()}
    return pd.create_model(f"_{name.title()}", __base__=_Table, table=(ClassVar[str], name), **keys)


_Symptoms = _table("symptoms", SymptomSettings)
_State = _table("state", StateSettings)


class FeatureConfig(_Table):
    model_config = pd.ConfigDict(extra="forbid", strict=True, frozen=True)
    affects_loss: bool = False


def _feature_name(name: str) -> str:
    if not fb.NAME_RE.match(name):
        raise _Bad(f"bad feature name {name!r} in [features]")
    return name


class Document(_Table):
    """The whole file; `Document.model_validate(data)` raises pydantic.ValidationError."""

    trial: _Trial = _Trial()
    symptoms: _Symptoms = _Symptoms()
    features: dict[Annotated[str, pd.AfterValidator(_feature_name)], FeatureConfig] = {}
    state: _State = _State()


def first_error(e: pd.ValidationError, data: dict[str, object]) -> tuple[str, str, str | None, str | None]:
    """The first of pydantic's errors, in tfrepro's words: (message, table,
    key, hint); the caller finds its line."""
    errors = sorted(e.errors(), key=lambda err: _rank(err, data))
    loc = errors[0]["loc"]
    n = 2 if loc[0] == "features" and len(loc) > 1 else 1  # [features.NAME] is a table of its own
    table, key = ".".join(map(str, loc[:n])), str(loc[n]) if len(loc) > n else None
    kind, value, hint = errors[0]["type"], errors[0]["input"], None
    if isinstance(bad := errors[0].get("ctx", {}).get("error"), _Bad):
        msg, hint, key = bad.msg, bad.hint, bad.key or key
    elif kind == "extra_forbidden" and key is None:
        msg, hint = f"unknown table [{table}]", "tables are [trial], [symptoms], [state] and [features.NAME]"
    elif kind == "extra_forbidden":
        msg = f"unknown key `{key}` in [{table}]"
        known = Document.model_fields[table].annotation.model_fields if n == 1 else None
        hint = "known keys: " + ", ".join(known) if known else "the only key is affects_loss = true|false"
    elif key is None:
        msg = f"`{table}` must be a table" if n == 1 else f"[{table}] must be a table"
    else:
        names = " or ".join(_TYPE_NAMES[err["type"]] for err in errors if err["loc"][: n + 1] == loc[: n + 1])
        got = "a boolean" if isinstance(value, bool) else f"{type(value).__name__} {value!r}"
        msg = f"[{table}] {key}: expected {names}, got {got}"
    return msg, table, key, hint


def _rank(err: ErrorDetails, data: dict[str, object]) -> tuple[int, list[int]]:
    """Unknown tables first, then a table that is none, the bounds, the
    rest; each by where it is written (the known tables in their order)."""
    loc, bad = err["loc"], err.get("ctx", {}).get("error")
    if isinstance(bad, _OutOfBounds):
        phase = 2
    else:
        phase = (0 if err["type"] == "extra_forbidden" else 1) if len(loc) == 1 and bad is None else 3
    where: list[int] = []
    level: object = dict.fromkeys(("trial", "symptoms", "features", "state")) | data
    for part in loc:
        if not isinstance(level, dict) or part not in level:
            break
        where.append(list(level).index(part))
        level = level[part]
    return phase, where
