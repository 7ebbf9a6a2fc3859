"""A project directory: its manifest, its marked files, its variants.

`Project.load` reads and validates everything up front (every malformed
marker or manifest entry is a `UserError` naming file:line), so nothing is run
or written for a bad project. Variants are written under a destination the
caller chooses (always below `.tfrepro/` or a temp dir, never the user's files).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfrepro import features as fb
from tfrepro.errors import UserError
from tfrepro.projectfiles import (
    EXCLUDED_DIRS,
    MANIFEST,
    STATE_DIR,
    FileNote,
    copy_file,
    iter_project_files,
    write_in_place,
)
from tfrepro.projectload import detected_sources, locate, marked_sources, selection
from tfrepro.settings import StateSettings, SymptomSettings, TrialSettings

__all__ = ["EXCLUDED_DIRS", "MANIFEST", "STATE_DIR", "Manifest", "Project", "iter_project_files"]

# Finite bounds of the numeric settings: nan, inf or 1e300 would silently
# switch a check off. (low, high, low is exclusive)
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "timeout_s": (0.0, 7 * 24 * 3600.0, True),
    "slowdown": (1.0, 1000.0, True),
    "mismatch": (0.0, 100.0, False),
    "memory": (1.0, 1000.0, True),
    "keep_runs": (0, 100_000, False),
    "keep_trials": (0, 1_000_000, False),
    "copy_budget_mb": (0.0, 1e8, False),
}


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
    def _from_data(cls, data: dict[str, Any], text: str, path: str) -> "Manifest":
        def err(msg: str, table: str, key: str | None = None, hint: str | None = None) -> UserError:
            return UserError(msg, path=path, line=_line_of(text, table, key), hint=hint)

        for table in data:
            if table not in ("trial", "symptoms", "features", "state"):
                raise err(
                    f"unknown table [{table}]",
                    table,
                    None,
                    hint="tables are [trial], [symptoms], [state] and [features.NAME]",
                )
        trial = data.get("trial", {})
        symptoms = data.get("symptoms", {})
        feats = data.get("features", {})
        state = data.get("state", {})
        for table, value in (("trial", trial), ("symptoms", symptoms), ("features", feats), ("state", state)):
            if not isinstance(value, dict):
                raise err(f"`{table}` must be a table", table)
        for table, values in (("trial", trial), ("symptoms", symptoms), ("state", state)):
            for key, value in values.items():
                # trial and symptom keys below their low bound get their own message below
                if (
                    key in _BOUNDS
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and (table == "state" or key == "memory" or not value <= _BOUNDS[key][0])
                ):
                    _check_bounds(value, key, lambda m, t=table, k=key: err(f"[{t}] {k}: {m}", t, k))

        t_kw: dict[str, Any] = {}
        repeats = 1
        spec = {
            "entry": (str,),
            "command": (list,),
            "steps": (int,),
            "timeout_s": (int, float),
            "repeats": (int,),
            "seed": (int,),
            "deterministic": (bool,),
            "gpus": (int, str),
            "memory_limit_mb": (int,),
        }
        for key, value in trial.items():
            if key not in spec:
                raise err(f"unknown key `{key}` in [trial]", "trial", key, hint="known keys: " + ", ".join(spec))
            _check_type(value, spec[key], lambda m, k=key: err(f"[trial] {k}: {m}", "trial", k))
            if key == "command":
                if not value or not all(isinstance(x, str) for x in value):
                    raise err(
                        "[trial] command must be a non-empty list of strings",
                        "trial",
                        key,
                        hint='e.g. command = ["python", "train.py", "--fast"]',
                    )
                t_kw[key] = tuple(value)
            elif key == "entry" and _outside(value):
                raise err(
                    f"[trial] entry {value!r} is outside the project",
                    "trial",
                    key,
                    hint="give the script's path relative to the project directory, e.g. "
                    'entry = "train.py" (to run a script elsewhere: command = ["python", "/path/x.py"])',
                )
            elif key in ("steps", "repeats") and value < 1:
                raise err(f"[trial] {key} must be at least 1, not {value}", "trial", key)
            elif key == "timeout_s" and value <= 0:
                raise err(f"[trial] timeout_s must be positive, not {value}", "trial", key)
            elif key == "gpus" and (value != "all" if isinstance(value, str) else not 0 <= value <= 1024):
                raise err(
                    f'[trial] gpus is a count (0-1024) or "all", not {value!r}',
                    "trial",
                    key,
                    hint='e.g. gpus = 1, gpus = 4 or gpus = "all"',
                )
            elif key == "memory_limit_mb" and not 64 <= value <= 1 << 30:
                raise err(f"[trial] memory_limit_mb must be between 64 and {1 << 30}, not {value}", "trial", key)
            elif key == "repeats":
                repeats = value
            else:
                t_kw[key] = float(value) if key == "timeout_s" else value
        if "entry" in t_kw and "command" in t_kw:
            raise err("[trial] has both `entry` and `command`; keep one", "trial", "command")

        s_kw: dict[str, Any] = {}
        s_spec = {"nan": (bool,), "slowdown": (int, float), "mismatch": (int, float), "memory": (int, float)}
        for key, value in symptoms.items():
            if key not in s_spec:
                raise err(
                    f"unknown key `{key}` in [symptoms]", "symptoms", key, hint="known keys: " + ", ".join(s_spec)
                )
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

        st_kw: dict[str, Any] = {}
        st_spec = {"keep_runs": (int,), "keep_trials": (int,), "copy_budget_mb": (int, float)}
        for key, value in state.items():
            if key not in st_spec:
                raise err(f"unknown key `{key}` in [state]", "state", key, hint="known keys: " + ", ".join(st_spec))
            _check_type(value, st_spec[key], lambda m, k=key: err(f"[state] {k}: {m}", "state", k))
            st_kw[key] = float(value) if key == "copy_budget_mb" else value

        return cls(
            trial=TrialSettings(**t_kw),
            repeats=repeats,
            symptoms=SymptomSettings(**s_kw),
            features=f_cfg,
            path=path,
            state=StateSettings(**st_kw),
        )


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


def _line_of(text: str, table: str, key: str | None) -> int | None:
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


class Project:
    """A loaded, validated project. Cheap to keep; never writes into root."""

    def __init__(self, root: Path, manifest: Manifest, sources: dict[str, fb.SourceFile], files: list[str]) -> None:
        self.root = root
        self.manifest = manifest
        self.sources = sources  # relpath -> parsed file, only files with blocks
        self.files = files  # every project file (relpaths, posix)
        self.warnings: list[str] = []  # files skipped (special files, dangling symlinks)
        self._hash_memo: dict[tuple[str, int, int], str] = {}
        # Zero-edit mode (no marker in any file): the blocks were detected by
        # the annotator and live only in memory (`sources` hold annotated texts).
        self.detected = False
        self.detection: Any = None  # tfrepro.annotate.zeroedit.Detection when detected
        # Features that are not candidates (--only/--skip, preflight): name ->
        # why; their blocks stay in the state in `fixed_on` (ON) or OFF.
        self.excluded: dict[str, str] = {}
        self.fixed_on: frozenset[str] = frozenset()

    # -- loading -----------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path = ".",
        *,
        detect: bool = True,
        only: Iterable[str] | None = None,
        skip: Iterable[str] | None = None,
    ) -> "Project":
        """Load and validate a project. A project with no marker in any file
        is zero-edit: its features are detected in memory (`detect=False`:
        none). `only`/`skip`: see `select`."""
        root, entry_override = locate(path)
        manifest_path = root / MANIFEST
        if manifest_path.is_dir():
            raise UserError(
                f"{MANIFEST} is a directory, not a file",
                path=manifest_path,
                hint=f"remove or rename that directory ({MANIFEST} is tfrepro's settings file)",
            )
        if manifest_path.exists():
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
            manifest = Manifest.parse(text, str(manifest_path))
        else:
            text, manifest = "", Manifest()
        if entry_override and manifest.trial.command is None:
            manifest = replace(manifest, trial=replace(manifest.trial, entry=entry_override))

        skipped: list[str] = []
        files = [f.as_posix() for f in iter_project_files(root, skipped)]
        sources = marked_sources(root, files)

        if manifest.trial.command is None:
            entry = root / manifest.trial.entry
            if not entry.is_file():
                raise UserError(
                    f"the trial entry {manifest.trial.entry!r} does not exist in {root}",
                    path=manifest.path or root,
                    line=_line_of(text, "trial", "entry") if manifest.path else None,
                    hint='set [trial] entry = "your_script.py" (or command = [...]) in tfrepro.toml',
                )
        detection = None
        if not sources and detect:
            sources, detection = detected_sources(root, manifest.trial.entry, manifest.trial.command, files)
        project = cls(root, manifest, sources, files)
        project.warnings = skipped
        if detection is not None:
            project.detected, project.detection = True, detection
        known = set(project.feature_names)
        for name in manifest.features:
            if name not in known:
                raise UserError(
                    f"[features.{name}] names a feature that no file marks",
                    path=manifest.path,
                    line=_line_of(text, f"features.{name}", None),
                    hint="known features: " + (", ".join(sorted(known)) or "(none)"),
                )
        if only is not None or skip is not None:
            project = project.select(only, skip)
        return project

    def _copy(self) -> "Project":
        other = Project(self.root, self.manifest, self.sources, self.files)
        other.detected, other.detection = self.detected, self.detection
        other.excluded, other.fixed_on = dict(self.excluded), self.fixed_on
        return other

    def select(self, only: Iterable[str] | None = None, skip: Iterable[str] | None = None) -> "Project":
        """A project whose candidate features are those named in `only` (all
        when None) minus `skip`. Each item is a feature name, a name prefix
        (`callback` for callback_*) or a catalog kind (`dataset`). The others
        stay as written (ON for detected features) in every variant."""
        return self.exclude(selection(self.feature_names, only, skip, root=self.root))

    def exclude(self, why: dict[str, str], *, on: bool = True) -> "Project":
        """A project without the features `why` names as candidates (name ->
        reason); they stay ON (`on`) or as written, in every variant."""
        other = self._copy()
        other.excluded.update(why)
        states = self.states_in_files()
        if on:
            other.fixed_on = self.fixed_on | frozenset(why)
        else:
            other.fixed_on = self.fixed_on | frozenset(n for n in why if states.get(n) is not False)
        return other

    def locations(self, name: str) -> list[tuple[str, int]]:
        """(relpath, line) of each block of `name`; for detected features the
        line of the code in the original file."""
        if self.detection is not None:
            return [(f.path, f.line) for f in self.detection.found if f.name == name]
        return [(Path(b.path).relative_to(self.root).as_posix(), b.line) for b in self.features.get(name, [])]

    # -- features ----------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def blocks(self) -> list[fb.Block]:
        return [b for s in self.sources.values() for b in s.blocks if b.name not in self.excluded]

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(sorted({b.name for b in self.blocks}))

    @property
    def features(self) -> dict[str, list[fb.Block]]:
        out: dict[str, list[fb.Block]] = {}
        for b in self.blocks:
            out.setdefault(b.name, []).append(b)
        return dict(sorted(out.items()))

    def description(self, name: str) -> str:
        return next((b.description for b in self.features.get(name, []) if b.description), "")

    @property
    def affects_loss(self) -> frozenset[str]:
        """From tfrepro.toml; detected features default to the catalog's say."""
        declared = self.manifest.features
        detected = self.detection.affects_loss if self.detection is not None else frozenset()
        return frozenset(
            n
            for n in set(declared) | detected
            if (declared[n].affects_loss if n in declared else True) and n not in self.excluded
        )

    def states_in_files(self) -> dict[str, bool | None]:
        """Each feature's state as written: True/False, None when its blocks disagree."""
        out: dict[str, bool | None] = {}
        for name, blocks in self.features.items():
            states = {b.state for b in blocks}
            out[name] = states.pop() if len(states) == 1 else None
        return out

    def check_names(self, names: Iterable[str]) -> frozenset[str]:
        names = frozenset(names)
        unknown = sorted(names - set(self.feature_names))
        if unknown:
            raise UserError(
                f"unknown feature{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                path=self.root,
                hint="known features: " + (", ".join(self.feature_names) or "(none)"),
            )
        return names

    # -- variants ----------------------------------------------------------
    def render(self, enabled: Iterable[str] | None) -> dict[str, str]:
        """relpath -> text of every marked file with the given features ON
        (`None`: as written)."""
        enabled = None if enabled is None else set(enabled) | self.fixed_on
        return {rel: s.render(enabled) for rel, s in self.sources.items()}

    def export(self, enabled: Iterable[str] | None) -> dict[str, str]:
        """relpath -> standalone text (markers and inactive parts removed)."""
        enabled = None if enabled is None else set(enabled) | self.fixed_on
        return {rel: s.export(enabled) for rel, s in self.sources.items()}

    def write_variant(self, enabled: Iterable[str] | None, dest: Path) -> dict[str, Any]:
        """Copy the project to `dest` with marked files rendered; `dest` must
        not exist or be empty. Every file is the variant's own (a reflink or
        a copy, never a link: see `projectfiles`), so nothing a trial writes
        reaches the user's files. Copies beyond `[state] copy_budget_mb`
        raise a UserError naming the file. Returns how the files were made,
        for `TrialResult.extra["files"]`: {"copied", "copied_bytes",
        "reflinked" (relpaths), "rendered"}."""
        dest = Path(dest)
        rendered = self.render(enabled)
        budget = int(self.manifest.state.copy_budget_mb * 1024 * 1024)
        note = FileNote()
        dest.mkdir(parents=True, exist_ok=True)
        for rel in self.files:
            src, out = self.root / rel, dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            if rel in rendered:
                out.write_bytes(self.sources[rel].encode(rendered[rel]))
                shutil.copymode(src, out)
                note.rendered += 1
            else:
                copy_file(src, out, rel, note, budget)
        return note.to_dict()

    def variant_hash(self, enabled: Iterable[str] | None) -> str:
        """Content hash of the variant (every file, rendered), stable across
        machines: relpaths and bytes only."""
        rendered = self.render(enabled)
        h = hashlib.sha256()
        for rel in self.files:
            h.update(rel.encode() + b"\0")
            if rel in rendered:
                h.update(hashlib.sha256(rendered[rel].encode("utf-8")).hexdigest().encode())
            else:
                h.update(self._file_digest(rel).encode())
            h.update(b"\0")
        return h.hexdigest()

    def _file_digest(self, rel: str) -> str:
        st = (self.root / rel).stat()
        memo_key = (rel, st.st_size, st.st_mtime_ns)
        if memo_key not in self._hash_memo:
            h = hashlib.sha256()
            with open(self.root / rel, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self._hash_memo[memo_key] = h.hexdigest()
        return self._hash_memo[memo_key]

    # -- writing states (the one operation that edits the user's files) -----
    def set_states(self, states: dict[str, bool]) -> list[str]:
        """Rewrite the named features' states in place; returns the relpaths
        changed. Validates every name and prepares every file's bytes before
        writing anything. Bytes outside the switched parts are kept (line
        endings, BOM, declared encoding); a symlinked or hard-linked file is
        written through to its target (`projectfiles.write_in_place`)."""
        if self.detected:
            raise UserError(
                "these features were detected in memory: the files have no feature blocks to switch",
                path=self.root,
                hint="`tfrepro annotate --write` marks them in the files first",
            )
        self.check_names(states)
        new_bytes: dict[str, bytes] = {}
        for rel, s in self.sources.items():
            text = s.set_states(states)
            if text != s.text:
                new_bytes[rel] = s.encode(text)
        for rel, data in new_bytes.items():
            write_in_place(self.root / rel, data)
        return list(new_bytes)
