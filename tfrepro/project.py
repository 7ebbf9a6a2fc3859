"""A project directory: its manifest (`tfrepro.toml`), its features, its variants.

`Project.load` reads and validates everything up front (every malformed
marker or manifest entry is a `UserError` naming file:line), so nothing is run
or written for a bad project. Variants are written under a destination the
caller chooses (always below `.tfrepro/` or a temp dir, never the user's files).

How `Project.load` finds a project and its features: `locate` (a project
directory, or a plain script, which belongs to the nearest enclosing project
and becomes its entry), `marked_sources` (the files with feature-block markers,
Contract 1), else zero-edit detection (annotated in memory, nothing
written), `selection` (`--only` / `--skip`), the script's arguments (`tfrepro
bisect train.py -- --epochs 3`: after `[trial] command`, or `python ENTRY`, as
`git bisect run` passes its command's).

`tfrepro.toml` (Contract 2) is read and validated up front too (`Manifest`):
every unknown table or key, wrong type and out-of-range value is a UserError
naming file:line, with a hint. The tables are strict pydantic models
(manifest_schema.py, imported only when there is a file to validate).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

from tfrepro import catalog
from tfrepro import features as fb
from tfrepro.errors import UserError
from tfrepro.projectfiles import (
    MANIFEST,
    FileNote,
    copy_file,
    find_root,
    imported_files,
    iter_project_files,
    protected_dirs,
    write_in_place,
)
from tfrepro.settings import StateSettings, SymptomSettings, TrialSettings

if TYPE_CHECKING:
    from tfrepro.annotate import Detection
    from tfrepro.manifest_schema import FeatureConfig


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
        import pydantic

        from tfrepro import manifest_schema

        try:
            doc = manifest_schema.Document.model_validate(data)
        except pydantic.ValidationError as e:
            msg, table, key, hint = manifest_schema.first_error(e, data)
            raise UserError(msg, path=path, line=line_of(text, table, key), hint=hint) from None
        return cls(
            # the values as validated (model_dump would turn `command`'s tuple back into a list)
            trial=TrialSettings(**{k: getattr(doc.trial, k) for k in doc.trial.model_fields_set - {"repeats"}}),
            repeats=doc.trial.repeats or 1,
            symptoms=SymptomSettings(**doc.symptoms.model_dump(exclude_unset=True)),
            features=doc.features,
            path=path,
            state=StateSettings(**doc.state.model_dump(exclude_unset=True)),
        )


def line_of(text: str, table: str, key: str | None) -> int | None:
    """Best-effort line number of `[table]` / `key =` in a TOML text."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]")
    at = next((i + 1 for i, line in enumerate(lines) if header.match(line)), None)  # the header's line
    if key is None:
        return at
    keyre = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(at or 0, len(lines)):  # within the table, or anywhere without its header
        if at is not None and lines[i].lstrip().startswith("["):
            break
        if keyre.match(lines[i]):
            return i + 1
    return at


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
    data = manifest_path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            "not UTF-8 text (TOML files are UTF-8)",
            path=manifest_path,
            line=data[: e.start].count(b"\n") + 1,
            hint="save tfrepro.toml as UTF-8",
        ) from None
    return text, Manifest.parse(text, str(manifest_path))


def locate(path: str | Path) -> tuple[Path, str | None]:
    """(the project root, the entry a script path names or None): `path` is
    a project directory or its `.py` training script."""
    p = Path(path)
    if not p.exists():
        raise UserError("no such file or directory", path=p, hint="give the project directory (or its .py entry file)")
    if not p.is_file():
        if (root := p.resolve()) in protected_dirs():
            raise UserError(
                "this is your home directory (or /): tfrepro would copy all of it into every trial",
                path=root,
                hint="give the folder that holds the training script and its files",
            )
        return root, None
    if p.suffix != ".py":
        raise UserError(
            "not a Python file or a project directory",
            path=p,
            hint="give the project directory, or the training script ending in .py",
        )
    # The script's project: the nearest tfrepro.toml/.git/pyproject.toml
    # above it, else its folder; never $HOME or / (projectfiles.find_root).
    root = find_root(p)
    return root, p.resolve().relative_to(root).as_posix()


def marked_sources(root: Path, files: Iterable[str]) -> dict[str, fb.SourceFile]:
    """relpath -> parsed file, for every .py file with at least one feature
    block (a malformed marker is a UserError naming file:line)."""
    sources: dict[str, fb.SourceFile] = {}
    nested = {rel.rsplit("/", 1)[0] for rel in files if rel.endswith("/tfrepro.toml")}  # projects of their own
    for rel in files:
        if not rel.endswith(".py") or any(rel.startswith(n + "/") for n in nested):
            continue  # a project of its own below this one (`tfrepro new sub`) marks its own features
        full = root / rel
        data = full.read_bytes()
        if b"tfrepro:" not in data:  # no marker: never decoded, whatever its encoding
            continue
        src, encoding = fb.decode_source(data, str(full))
        parsed = fb.parse(src, str(full), encoding)
        if parsed.blocks:
            sources[rel] = parsed
    return sources


def selection(
    names: Sequence[str], only: Iterable[str] | None, skip: Iterable[str] | None, *, root: Path
) -> dict[str, str]:
    """feature -> why it is not a candidate: those not named in `only` (all
    are when None), and those named in `skip`. Each item is a feature name, a
    name prefix (`callback` for callback_*) or a catalog kind (`dataset`); one
    that matches no feature is a UserError."""

    def match(item: str) -> set[str]:
        got = {n for n in names if n == item or n.startswith(item + "_") or catalog.kind_of(n) == item}
        if not got:
            raise UserError(
                f"no feature matches {item!r}",
                path=root,
                hint="known features: " + (", ".join(names) or "(none)"),
            )
        return got

    keep = set(names) if only is None else set().union(*(match(x) for x in only))
    skipped = set().union(*(match(x) for x in skip or ()))
    return dict.fromkeys(set(names) - keep, "not in --only") | dict.fromkeys(skipped, "--skip")


@dataclass(eq=False)
class Project:
    """A loaded, validated project. Cheap to keep; never writes into root."""

    root: Path
    manifest: Manifest
    sources: dict[str, fb.SourceFile]  # relpath -> parsed file, only files with blocks
    files: list[str]  # every project file (relpaths, posix)
    warnings: list[str] = field(default_factory=list)  # files skipped (special files, dangling symlinks)
    # Zero-edit mode (no marker in any file): the blocks were detected by
    # the annotator and live only in memory (`sources` hold annotated texts).
    detection: Detection | None = None
    # Features that are not candidates (--only/--skip, preflight): name ->
    # why; their blocks stay in the state in `fixed_on` (ON) or OFF.
    excluded: dict[str, str] = field(default_factory=dict)
    fixed_on: frozenset[str] = frozenset()
    _hash_memo: dict[tuple[str, int, int], str] = field(default_factory=dict, init=False, repr=False)

    # -- loading -----------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path = ".",
        *,
        detect: bool = True,
        only: Iterable[str] | None = None,
        skip: Iterable[str] | None = None,
        script_args: Sequence[str] = (),
        root: str | Path | None = None,
    ) -> "Project":
        """Load and validate a project. A project with no marker in any file
        is zero-edit: its features are detected in memory (`detect=False`:
        none). `only`/`skip`: the candidates (`selection`; the
        others stay as written, ON for detected features, in every variant).
        `root`: the project's directory when it is known (a commit's checkout
        under `.tfrepro/`: never the project found above it), `path` then its
        entry script or itself."""
        if root is None:
            root, entry_override = locate(path)
        else:
            root, script = Path(root).resolve(), Path(path).resolve()
            entry_override = script.relative_to(root).as_posix() if script.is_file() else None
        text, manifest = read_manifest(root)
        if entry_override and manifest.trial.command is None:
            manifest = replace(manifest, trial=replace(manifest.trial, entry=entry_override))

        skipped: list[str] = []
        files = [f.as_posix() for f in iter_project_files(root, skipped)]
        sources = marked_sources(root, files)

        if manifest.trial.command is None and not (root / manifest.trial.entry).is_file():
            raise UserError(
                f"the trial entry {manifest.trial.entry!r} does not exist in {root}",
                path=manifest.path or root,
                line=line_of(text, "trial", "entry") if manifest.path else None,
                hint='set [trial] entry = "your_script.py" (or command = [...]) in tfrepro.toml',
            )
        if script_args:  # `tfrepro bisect train.py -- ARGS`: every trial passes them on
            command = (*(manifest.trial.command or ("python", manifest.trial.entry)), *script_args)
            manifest = replace(manifest, trial=replace(manifest.trial, command=command))
        detection = None
        if not sources and detect:  # zero-edit: the entry script and the modules it imports, annotated in memory
            from tfrepro.annotate import default_targets, detect_blocks, entry_scripts

            entries = entry_scripts(manifest.trial.entry, manifest.trial.command, files)  # `entry`, or `command`'s .py
            # every non-test .py file when the entry is unknown
            detection = detect_blocks(root, imported_files(root, entries, files) if entries else default_targets(files))
            sources = {rel: fb.parse(t, str(root / rel)) for rel, t in detection.texts.items()}
        project = cls(root, manifest, sources, files, skipped, detection)
        project._check_feature_tables(text)
        if only is not None or skip is not None:
            project = project.exclude(selection(project.feature_names, only, skip, root=root))
        return project

    def _check_feature_tables(self, text: str) -> None:
        """Every `[features.NAME]` of tfrepro.toml names a feature of the project."""
        known = set(self.feature_names)
        for name in self.manifest.features:
            if name not in known and self.detected:
                # Detected in memory: the table may describe the script of
                # another commit (`git bisect run` over history); the
                # setting applies to nothing here, which is said, not fatal.
                self.warnings.append(f"tfrepro.toml: [features.{name}] names no feature detected in this script")
            elif name not in known:
                raise UserError(
                    f"[features.{name}] names a feature that no file marks",
                    path=self.manifest.path,
                    line=line_of(text, f"features.{name}", None),
                    hint="known features: " + (", ".join(sorted(known)) or "(none)"),
                )

    def exclude(self, why: dict[str, str]) -> "Project":
        """A project without the features `why` names as candidates (name ->
        reason); they stay ON in every variant."""
        # what loading found (skipped files, stale tables) still holds
        return replace(
            self, warnings=list(self.warnings), excluded=self.excluded | why, fixed_on=self.fixed_on | frozenset(why)
        )

    def locations(self, name: str) -> list[tuple[str, int]]:
        """(relpath, line) of each block of `name`; for detected features the
        line of the code in the original file."""
        if self.detection is not None:
            return [(f.path, f.line) for f in self.detection.found if f.name == name]
        return [(Path(b.path).relative_to(self.root).as_posix(), b.line) for b in self.features.get(name, [])]

    # -- features ----------------------------------------------------------
    @property
    def detected(self) -> bool:
        return self.detection is not None

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(self.features)  # sorted

    @property
    def features(self) -> dict[str, list[fb.Block]]:
        blocks = [b for s in self.sources.values() for b in s.blocks if b.name not in self.excluded]
        by_name = sorted(blocks, key=lambda b: b.name)  # stable: a feature's blocks in file order
        return {name: list(group) for name, group in groupby(by_name, key=lambda b: b.name)}

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
        states = {name: {b.state for b in blocks} for name, blocks in self.features.items()}
        return {name: s.pop() if len(s) == 1 else None for name, s in states.items()}

    def check_names(self, names: Iterable[str]) -> frozenset[str]:
        names = frozenset(names)
        if unknown := sorted(names - set(self.feature_names)):
            raise UserError(
                f"unknown feature{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                path=self.root,
                hint="known features: " + (", ".join(self.feature_names) or "(none)"),
            )
        return names

    # -- variants ----------------------------------------------------------
    def render(self, enabled: Iterable[str] | None, *, export: bool = False) -> dict[str, str]:
        """relpath -> text of every marked file with the given features ON
        (`None`: as written); `export`: standalone (markers and inactive parts removed)."""
        enabled = None if enabled is None else set(enabled) | self.fixed_on
        return {rel: s.render(enabled, export=export) for rel, s in self.sources.items()}

    def write_variant(self, enabled: Iterable[str] | None, dest: Path) -> FileNote:
        """Copy the project to `dest` with marked files rendered; `dest` must
        not exist or be empty. Every file is the variant's own (a reflink or
        a copy, never a link: see `projectfiles`), so nothing a trial writes
        reaches the user's files. Copies beyond `[state] copy_budget_mb`
        raise a UserError naming the file. Returns how the files were made
        (for `TrialResult.extra["files"]`)."""
        rendered = self.render(enabled)
        budget = int(self.manifest.state.copy_budget_mb * 1024 * 1024)
        note = FileNote()
        dest.mkdir(parents=True, exist_ok=True)
        for rel in self.files:
            src, out = self.root / rel, dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            if rel in rendered:
                out.write_bytes(rendered[rel].encode(self.sources[rel].encoding))
                shutil.copymode(src, out)
                note.rendered += 1
            else:
                copy_file(src, out, rel, note, budget)
        return note

    def variant_hash(self, enabled: Iterable[str] | None) -> str:
        """Content hash of the variant (every file, rendered), stable across
        machines: relpaths and bytes only."""
        rendered = self.render(enabled)
        h = hashlib.sha256()
        for rel in self.files:
            if rel in rendered:
                digest = hashlib.sha256(rendered[rel].encode("utf-8")).hexdigest()
            else:  # memoised by size and mtime
                st = (self.root / rel).stat()
                key = (rel, st.st_size, st.st_mtime_ns)
                if key not in self._hash_memo:
                    with open(self.root / rel, "rb") as f:
                        self._hash_memo[key] = hashlib.file_digest(f, "sha256").hexdigest()
                digest = self._hash_memo[key]
            h.update(f"{rel}\0{digest}\0".encode())
        return h.hexdigest()

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
        new_bytes = {
            rel: text.encode(s.encoding) for rel, s in self.sources.items() if (text := s.set_states(states)) != s.text
        }
        for rel, data in new_bytes.items():
            write_in_place(self.root / rel, data)
        return list(new_bytes)
