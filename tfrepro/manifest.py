"""`tfrepro.toml` (Contract 2): read and validated up front.

Every unknown table or key, wrong type and out-of-range value is a
`UserError` naming the file and the line, with a hint, before anything runs.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfrepro import features as fb
from tfrepro.errors import UserError
from tfrepro.projectfiles import MANIFEST
from tfrepro.settings import MAX_REPLICAS, StateSettings, SymptomSettings, TrialSettings

# Finite bounds of the numeric settings: nan, inf or 1e300 would silently
# switch a check off. (low, high, low is exclusive)
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "timeout_s": (0.0, 7 * 24 * 3600.0, True),
    "budget_s": (0.0, 7 * 24 * 3600.0, True),
    "slowdown": (1.0, 1000.0, True),
    "mismatch": (0.0, 100.0, False),
    "memory": (1.0, 1000.0, True),
    "keep_runs": (0, 100_000, False),
    "keep_trials": (0, 1_000_000, False),
    "copy_budget_mb": (0.0, 1e8, False),
    "keep_mb": (0.0, 1e8, False),
}


def _check_budget(settings: TrialSettings, given: bool, err: Callable[..., UserError]) -> TrialSettings:
    """`budget_s` (the failing configuration's run until its symptom) must end
    before the trial's `timeout_s` kills it (`given`: set in [trial]); left
    out, it is the default or half of a shorter `timeout_s`."""
    timeout = settings.timeout_s
    if not given:
        return replace(settings, budget_s=timeout / 2) if settings.budget_s >= timeout else settings
    if settings.budget_s >= timeout:
        raise err(
            f"[trial] budget_s ({settings.budget_s:g} s) must be less than timeout_s ({timeout:g} s)",
            "trial",
            "budget_s",
            hint=f"e.g. budget_s = {timeout / 2:g}, or raise timeout_s",
        )
    return settings


@dataclass(frozen=True)
class FeatureConfig:
    affects_loss: bool = False


@dataclass(frozen=True)
class Manifest:
    trial: TrialSettings = TrialSettings()
    repeats: int = 1
    symptoms: SymptomSettings = SymptomSettings()
    features: dict[str, FeatureConfig] = field(default_factory=dict)
    path: str | None = None
    state: StateSettings = StateSettings()

    @classmethod
    def parse(cls, text: str, path: str = MANIFEST) -> "Manifest":
        """Validate a `tfrepro.toml` text (Contract 2). Raises UserError."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            m = re.search(r"\(at line (\d+)", str(e))
            raise UserError(
                f"not valid TOML: {e}",
                path=path,
                line=int(m.group(1)) if m else None,
                hint="see https://toml.io for the syntax",
            ) from None
        return cls._from_data(data, text, path)

    @classmethod
    def _from_data(cls, data: Mapping[str, object], text: str, path: str) -> "Manifest":
        def err(msg: str, table: str, key: str | None = None, hint: str | None = None) -> UserError:
            return UserError(msg, path=path, line=line_of(text, table, key), hint=hint)

        for table in data:
            if table not in ("trial", "symptoms", "features", "state"):
                raise err(
                    f"unknown table [{table}]",
                    table,
                    None,
                    hint="tables are [trial], [symptoms], [state] and [features.NAME]",
                )
        tables = {name: data.get(name, {}) for name in ("trial", "symptoms", "features", "state")}
        for table, value in tables.items():
            if not isinstance(value, dict):
                raise err(f"`{table}` must be a table", table)
        for table in ("trial", "symptoms", "state"):
            for key, value in tables[table].items():
                # trial and symptom keys below their low bound get their own message below
                if (
                    key in _BOUNDS
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and (table == "state" or key == "memory" or not value <= _BOUNDS[key][0])
                ):
                    _check_bounds(value, key, lambda m, t=table, k=key: err(f"[{t}] {k}: {m}", t, k))
        trial, repeats = _trial(tables["trial"], err)
        return cls(
            trial=trial,
            repeats=repeats,
            symptoms=_symptoms(tables["symptoms"], err),
            features=_features(tables["features"], err),
            path=path,
            state=_state(tables["state"], err),
        )


Err = Callable[..., UserError]
_TRIAL_TYPES: dict[str, tuple[type, ...]] = {
    "entry": (str,),
    "command": (list,),
    "steps": (int,),
    "timeout_s": (int, float),
    "budget_s": (int, float),
    "repeats": (int,),
    "seed": (int,),
    "deterministic": (bool,),
    "gpus": (int, str),
    "memory_limit_mb": (int,),
    "replicas": (int,),
}


def _trial(trial: Mapping[str, object], err: Err) -> tuple[TrialSettings, int]:
    """[trial] -> (its settings, repeats)."""
    t_kw: dict[str, Any] = {}
    repeats = 1
    for key, value in trial.items():
        if key not in _TRIAL_TYPES:
            raise err(f"unknown key `{key}` in [trial]", "trial", key, hint="known keys: " + ", ".join(_TRIAL_TYPES))
        _check_type(value, _TRIAL_TYPES[key], lambda m, k=key: err(f"[trial] {k}: {m}", "trial", k))
        _check_trial_value(key, value, err)
        if key == "command":
            t_kw[key] = tuple(value)
        elif key == "repeats":
            repeats = value
        else:
            t_kw[key] = float(value) if key in ("timeout_s", "budget_s") else value
    if "entry" in t_kw and "command" in t_kw:
        raise err("[trial] has both `entry` and `command`; keep one", "trial", "command")
    return _check_budget(TrialSettings(**t_kw), "budget_s" in t_kw, err), repeats


def _check_trial_value(key: str, value: Any, err: Err) -> None:
    """The range of one [trial] value of the right type."""
    if key == "command" and (not value or not all(isinstance(x, str) for x in value)):
        raise err(
            "[trial] command must be a non-empty list of strings",
            "trial",
            key,
            hint='e.g. command = ["python", "train.py", "--fast"]',
        )
    if key == "entry" and _outside(value):
        raise err(
            f"[trial] entry {value!r} is outside the project",
            "trial",
            key,
            hint="give the script's path relative to the project directory, e.g. "
            'entry = "train.py" (to run a script elsewhere: command = ["python", "/path/x.py"])',
        )
    if key in ("steps", "repeats") and value < 1:
        raise err(f"[trial] {key} must be at least 1, not {value}", "trial", key)
    if key in ("timeout_s", "budget_s") and value <= 0:
        raise err(f"[trial] {key} must be positive, not {value}", "trial", key)
    if key == "gpus" and (value != "all" if isinstance(value, str) else not 0 <= value <= 1024):
        raise err(
            f'[trial] gpus is a count (0-1024) or "all", not {value!r}',
            "trial",
            key,
            hint='e.g. gpus = 1, gpus = 4 or gpus = "all"',
        )
    if key == "seed" and not 0 <= value < 2**32:  # numpy's and PYTHONHASHSEED's range
        raise err(f"[trial] seed must be between 0 and {2**32 - 1}, not {value}", "trial", key, hint="e.g. seed = 0")
    if key == "memory_limit_mb" and not 64 <= value <= 1 << 30:
        raise err(f"[trial] memory_limit_mb must be between 64 and {1 << 30}, not {value}", "trial", key)
    if key == "replicas" and not 1 <= value <= MAX_REPLICAS:
        raise err(
            f"[trial] replicas must be between 1 and {MAX_REPLICAS}, not {value}",
            "trial",
            key,
            hint="e.g. replicas = 2: one device split into 2 logical ones for MirroredStrategy",
        )


def _symptoms(symptoms: Mapping[str, object], err: Err) -> SymptomSettings:
    s_kw: dict[str, Any] = {}
    s_spec = {"nan": (bool,), "slowdown": (int, float), "mismatch": (int, float), "memory": (int, float)}
    for key, value in symptoms.items():
        if key not in s_spec:
            raise err(f"unknown key `{key}` in [symptoms]", "symptoms", key, hint="known keys: " + ", ".join(s_spec))
        _check_type(value, s_spec[key], lambda m, k=key: err(f"[symptoms] {k}: {m}", "symptoms", k))
        if key == "slowdown" and value <= 1:
            raise err(
                f"[symptoms] slowdown is a ratio above 1, not {value}",
                "symptoms",
                key,
                hint="e.g. slowdown = 1.25 for 25% slower",
            )
        if key == "mismatch" and value < 0:
            raise err(f"[symptoms] mismatch must be >= 0, not {value}", "symptoms", key)
        s_kw[key] = float(value) if key != "nan" else value
    return SymptomSettings(**s_kw)


def _features(feats: Mapping[str, object], err: Err) -> dict[str, FeatureConfig]:
    f_cfg: dict[str, FeatureConfig] = {}
    for name, cfg in feats.items():
        where = f"features.{name}"
        if not fb.NAME_RE.match(name):
            raise err(f"bad feature name {name!r} in [features]", where)
        if not isinstance(cfg, dict):
            raise err(f"[features.{name}] must be a table", where)
        for key, value in cfg.items():
            if key != "affects_loss":
                raise err(
                    f"unknown key `{key}` in [features.{name}]",
                    where,
                    key,
                    hint="the only key is affects_loss = true|false",
                )
            _check_type(value, (bool,), lambda m, k=key: err(f"[features.{name}] {k}: {m}", where, k))
        f_cfg[name] = FeatureConfig(affects_loss=bool(cfg.get("affects_loss", False)))
    return f_cfg


def _state(state: Mapping[str, object], err: Err) -> StateSettings:
    st_kw: dict[str, Any] = {}
    st_spec = {"keep_runs": (int,), "keep_trials": (int,), "copy_budget_mb": (int, float), "keep_mb": (int, float)}
    for key, value in state.items():
        if key not in st_spec:
            raise err(f"unknown key `{key}` in [state]", "state", key, hint="known keys: " + ", ".join(st_spec))
        _check_type(value, st_spec[key], lambda m, k=key: err(f"[state] {k}: {m}", "state", k))
        st_kw[key] = float(value) if key in ("copy_budget_mb", "keep_mb") else value
    return StateSettings(**st_kw)


def _outside(entry: str) -> bool:
    """`entry` is absolute or climbs out of the project (`../x.py`)."""
    if os.path.isabs(entry) or entry.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", entry):
        return True
    return os.path.normpath(entry).split(os.sep)[0] == os.pardir


def _check_bounds(value: float, key: str, err) -> None:
    lo, hi, lo_open = _BOUNDS[key]
    if not math.isfinite(value):
        raise err(f"must be a finite number, not {value}")
    if value > hi or value < lo or (lo_open and value == lo):
        raise err(
            f"{value:g} is out of range: give a number {'above' if lo_open else 'of at least'} {lo:g} "
            f"and at most {hi:g}"
        )


def _check_type(value: Any, types: tuple[type, ...], err) -> None:
    # bool is an int in Python; a manifest `steps = true` is still a mistake.
    if isinstance(value, bool) and bool not in types:
        raise err(f"expected {' or '.join(t.__name__ for t in types)}, got a boolean")
    if not isinstance(value, types):
        raise err(f"expected {' or '.join(t.__name__ for t in types)}, got {type(value).__name__} {value!r}")


def line_of(text: str, table: str, key: str | None) -> int | None:
    """Best-effort line number of `[table]` / `key =` in a TOML text."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]")
    start = None
    for i, line in enumerate(lines):
        if header.match(line):
            start = i
            if key is None:
                return i + 1
            break
    if key is None:
        return None
    keyre = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(start + 1 if start is not None else 0, len(lines)):
        if start is not None and lines[i].lstrip().startswith("["):
            break
        if keyre.match(lines[i]):
            return i + 1
    return start + 1 if start is not None else None


def read_manifest(root: Path) -> tuple[str, Manifest]:
    """The project's `tfrepro.toml`, validated, and its text (for line
    numbers); without one, "" and the defaults."""
    manifest_path = root / MANIFEST
    if manifest_path.is_dir():
        raise UserError(
            f"{MANIFEST} is a directory, not a file",
            path=manifest_path,
            hint=f"remove or rename that directory ({MANIFEST} is tfrepro's settings file)",
        )
    if not manifest_path.exists():
        return "", Manifest()
    try:
        text = manifest_path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        line = manifest_path.read_bytes()[: e.start].count(b"\n") + 1
        raise UserError(
            "not UTF-8 text (TOML files are UTF-8)",
            path=manifest_path,
            line=line,
            hint="save tfrepro.toml as UTF-8",
        ) from None
    return text, Manifest.parse(text, str(manifest_path))
