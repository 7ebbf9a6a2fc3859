"""`tfrepro new --from train.py`: the user's own script as a repro project's files.

The same parts as the report, on the script as it is (no bisect run needed):

- the features: the zero-edit detection `tfrepro bisect train.py` uses
  (`Project.load`), kept as marker blocks (Contract 1), every one written OFF,
  so `python repro.py` is the stripped baseline and `tfrepro bisect` in the
  new project switches the same blocks the zero-edit bisect switched;
- the files: the entry (renamed repro.py) and the project modules it imports,
  as the report's export carries them (`export.bundle_files`'s rule);
- the data: when the script reads data files, one trial of the failing
  configuration (every feature ON, in a throwaway state dir) records the
  reads, and the report's own data pipeline (`reduce.choose_data`) picks
  what repro.py reads, each candidate kept when the new project's failing
  configuration ends as the script's did (`same_end`; the real records
  are reduced only for a NaN or a crash).

Then the tail: a line after the last training call that reads what an OFF
feature made is commented out (`comment_tail`, below), so `python repro.py` runs; the
script's arguments go into repro.py as its default ones and the user's
tfrepro.toml tables into the answers (scan.py; below):

- the arguments: those given after `--` (`tfrepro new --from train.py NEW
  -- --epochs 3`), else those of `[trial] command`, else those of the
  latest bisect run of the same script (its result.json records the trial
  command, `tfrepro bisect train.py -- --epochs 3`). The new repro.py takes
  them when it is given none (`scan.default_args`), so `python
  repro.py` and the new project's trials run as the script's did.
- the settings: `[trial]` (but `entry` and `command`: the new project runs
  `repro.py`), `[symptoms]` and `[state]`, as the user wrote them; they
  become the template's `settings` answer, written into the new
  tfrepro.toml. `[features.NAME]` tables are the `affects_loss` answer.

Nothing here writes the user's files: trials run on copies, the new files
are returned to the caller (`scaffold.generate.new_project(files=...)`).
"""

from __future__ import annotations

import ast
import re
import shlex
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfrepro import features as fb
from tfrepro.annotate.source import parse_python
from tfrepro.errors import UserError
from tfrepro.project import Project
from tfrepro.report.export import DATA, ENTRY, Export, bundle_files, entry_of, write_files
from tfrepro.report.records import run_dirs
from tfrepro.report.scan import default_args, script_args
from tfrepro.report.standin import STANDABLE, DataFacts, named
from tfrepro.settings import TrialSettings
from tfrepro.trials.state import STATE_DIR_NAME
from tfrepro.trials.values import TrialResult, read_json

# (project, features ON) -> the trial's result. The default runs a real one.
TrialFn = Callable[[Any, frozenset[str]], TrialResult]
Say = Callable[[str], None]


@dataclass(frozen=True)
class FromScript:
    """What `new --from` writes beside the template's files."""

    source: str  # the script, relative to its project
    files: dict[str, str]  # repro.py, the modules it imports
    features: tuple[str, ...]
    affects_loss: tuple[str, ...]
    data_facts: DataFacts = DataFacts()  # report.json's `data` facts, as the report's data pipeline gives them
    commented: tuple[Commented, ...] = ()  # tail lines that read what an OFF feature made
    script_args: tuple[str, ...] = ()  # repro.py takes them when given none
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # the user's tfrepro.toml tables kept
    records: bytes | None = None  # data.npz: the few real records a reduced repro reads

    @property
    def written(self) -> dict[str, str | bytes]:
        """Every file the new project gets beside the template's: `files`, and data.npz when reduced."""
        return self.files if self.records is None else {**self.files, DATA: self.records}

    def answers(self) -> dict[str, object]:
        return {
            "source_script": self.source,
            "features": list(self.features),
            "affects_loss": list(self.affects_loss),
            "data": self.data_facts.kind,
            "script_args": list(self.script_args),
            "settings": self.settings,
        }


def load_script(path: Path, script_args: Sequence[str] = ()) -> Any:
    """The project `tfrepro bisect train.py [-- ARGS]` would load (zero-edit
    detection), or a UserError (exit 2) saying what to give."""
    hint = "give your training script: tfrepro new --from train.py [DEST]"
    if not path.exists():
        raise UserError("no such file", path=path, hint=hint)
    if not path.is_file():
        raise UserError("not a file", path=path, hint=hint)
    if path.suffix != ".py":
        raise UserError("not a Python file", path=path, hint=hint + " (a .py file)")
    text, _ = fb.decode_source(path.read_bytes(), str(path))
    parse_python(text, str(path))  # a syntax error: file:line, exit 2
    return Project.load(path, script_args=script_args)


# A call of a data reader the recorder knows (a cheap, static check): the readers
# standin.py stands in for, and TFRecordDataset (reduce.py's).
_READS = re.compile(r"\b({})\s*\(".format("|".join([*STANDABLE.values(), "TFRecordDataset"])))


def export_script(project: Any, trial: TrialFn | None = None, say: Say | None = None) -> FromScript:
    """The new project's files from the loaded `project` (see the module doc).
    `trial` runs one configuration (tests pass a fake); `say` hears a line
    per step and per trial (the CLI prints them on stderr)."""
    say = say or (lambda _line: None)
    with tempfile.TemporaryDirectory(prefix="tfrepro-new-from-") as tmp:
        trial = saying(project, trial, say, Path(tmp) / "state")
        entry = entry_of(project.manifest.trial)
        texts = bundle_files(project, project.feature_names, entry, markers=True)  # every feature ON, markers kept
        args = tuple(script_args(project.manifest.trial, entry))
        say(f"{entry}: {len(project.feature_names)} features, each a block written OFF in repro.py")
        if args:
            say(f"repro.py takes the script's arguments when given none: {shlex.join(args)}")
        got, facts = Export(None, None, texts, {}), DataFacts()
        if any(_READS.search(t) for t in texts.values()):
            from tfrepro.report.reduce import choose_data

            say("the script reads data files: one trial with every feature ON records what it reads")
            orig = trial(project, frozenset(project.feature_names))
            counter = iter(range(1 << 30))

            def ends_alike(tried: Export) -> bool:
                repro = _all_off(default_args(tried.cand_files[ENTRY], ENTRY, args), ENTRY)
                new = write_project(Path(tmp) / f"try-{next(counter)}", {**tried.cand_files, ENTRY: repro}, tried.data)
                return same_end(orig, trial(new, frozenset(project.feature_names)))

            # the data step of the module doc: stand-ins, else (a NaN or a crash) the real records reduced
            shows = ends_alike if orig.nonfinite or orig.crashed else None
            got, facts = choose_data(
                project.root, {"failing": orig.to_dict()}, entry, got, check=ends_alike, shows=shows, say=say
            )
        on, commented = comment_tail(got.cand_files[ENTRY], entry)
        on = default_args(on, ENTRY, args)
        files = {rel: _all_off(on if rel == ENTRY else t, rel) for rel, t in texts.items()}
    names = tuple(project.feature_names)
    loss = tuple(sorted(set(project.affects_loss) & set(names)))
    # the user's tfrepro.toml tables the new project keeps ({} without one)
    path = project.manifest.path
    data = tomllib.loads(Path(path).read_text(encoding="utf-8")) if path and Path(path).is_file() else {}
    kept = {t: {k: v for k, v in (data.get(t) or {}).items() if k not in skip} for t, skip in CARRIED.items()}
    kept = {table: values for table, values in kept.items() if values}
    return FromScript(entry, files, names, loss, facts, tuple(commented), args, kept, got.data)


def _all_off(text: str, rel: str) -> str:
    parsed = fb.parse(text, rel)
    return parsed.set_states({n: False for n in parsed.feature_names}) if parsed.blocks else text


def saying(project: Any, trial: TrialFn | None, say: Say, state_dir: Path) -> TrialFn:
    """`trial` (None: real trials under the user's settings, cached nowhere
    the user sees: `state_dir`), with a line before and after each one (numbered)."""
    from tfrepro.trials.runner import run_trial
    from tfrepro.trials.trial import TrialOptions

    count = iter(range(1, 1 << 30))

    def run(p: Any, enabled: frozenset[str]) -> TrialResult:
        k, whose = next(count), "your script" if p is project else "a candidate repro.py"
        say(f"trial {k}: {whose}, {len(enabled)} features ON ...")
        if trial is not None:
            r = trial(p, enabled)
        else:
            s = project.manifest.trial if p is project else replace(project.manifest.trial, entry=ENTRY, command=None)
            r = run_trial(p, enabled, s, TrialOptions(use_cache=False, state_dir=state_dir, label="new-from"))
        say(f"trial {k}: {ending(r)} after {r.steps_run} steps ({r.wall_s:.1f} s)")
        return r

    return run


def ending(r: TrialResult) -> str:
    """How a trial ended, in a word or two."""
    if r.nonfinite:
        return "NaN/Inf"
    if r.crashed:
        return f"crash ({(r.error or '')[:80]})"
    return "timed out" if r.timed_out else "finite"


def same_end(orig: TrialResult, new: TrialResult) -> bool:
    """The new project's failing configuration ends as the script's did."""
    from tfrepro.report.rerun import same_error

    if orig.nonfinite:
        return new.nonfinite
    if orig.crashed:
        return new.crashed and same_error(new.error, orig.error)
    return not (new.crashed or new.timed_out or new.nonfinite) and new.steps_run > 0


def write_project(dest: Path, files: dict[str, str], data: bytes | None = None) -> Any:
    """`files` (and `data`, data.npz) as a marked project in `dest` (entry repro.py), loaded."""
    dest.mkdir(parents=True)
    return Project.load(write_files(dest, {"tfrepro.toml": f'[trial]\nentry = "{ENTRY}"\n', **files}, data))


def summary_lines(got: FromScript) -> list[str]:
    """What the command says about the data, a line each."""
    facts = got.data_facts
    out = []
    if facts.kind == "standins":
        out.append("data: repro.py reads seeded synthetic stand-ins of " + named(facts.standins))
    elif facts.kind == "reduced" and facts.reduction is not None:
        red = facts.reduction
        out.append(f"data: data.npz holds {red.records} of {red.of} records of " + named(red.files))
    elif facts.kind == "user":
        out.append(
            f"data: repro.py still reads your data files {named(facts.needs_user_data)} "
            "(no stand-in or reduction ended as the script did): run it where they are"
        )
    for c in got.commented:
        out.append(
            f"repro.py: line {c.line} ({c.code}) commented out: it reads {', '.join(c.names)}, "
            f"which only {', '.join(c.features)} used, OFF in the baseline"
        )
    for at in facts.unseen:
        out.append(f"data: the data fit trains on at {at} comes from a source tfrepro cannot see: the repro needs it")
    return out


# The tfrepro.toml tables `new --from` keeps, each without these keys.
CARRIED = {"trial": {"entry", "command"}, "symptoms": set(), "state": set()}


def recorded_args(root: Path, entry: str) -> tuple[list[str], str | None]:
    """The script arguments of the latest bisect run of `entry` under `root`
    (and that run's directory), or ([], None)."""
    runs = root / STATE_DIR_NAME / "runs"
    for run in reversed(run_dirs(runs) if runs.is_dir() else []):
        settings = (read_json(run / "result.json") or {}).get("settings")
        if not isinstance(settings, dict):
            continue
        recorded = TrialSettings.from_dict(settings)
        if recorded.entry == entry or entry in (recorded.command or ()):
            return script_args(recorded, entry), str(run)
    return [], None


# --- the tail: what the script does after its last training call with what a feature made.

# Calls that train: the last module-level statement holding one ends the training.
TRAINING_CALLS = frozenset({"fit", "fit_generator", "train_on_batch", "apply_gradients"})
NOTE = "# (tfrepro new --from) commented out so the baseline runs: it reads {names}, which only {features} used (OFF here)\n"


@dataclass(frozen=True)
class Commented:
    line: int  # its first line in the script (1-based)
    code: str  # its first line, stripped
    names: tuple[str, ...]
    features: tuple[str, ...]
    end: int = field(default=0, repr=False, compare=False)  # its last line
    indent: int = field(default=0, repr=False, compare=False)  # the column it is commented out at


def _names(node: ast.AST, ctx: type) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def comment_tail(text: str, path: str = "repro.py") -> tuple[str, list[Commented]]:
    """`text` (every feature ON, markers kept) with its tail statements that
    read a feature's names commented out, and what was commented.

    Every feature is written OFF in the new project, and a statement after the
    last training call may read what a feature made: `auc_cb.history[-1]` after
    a `fit` that trained without the callback (the block that passes it is OFF,
    the object is still built, its history stays empty: IndexError). The
    zero-edit bisect's trials stop at the step cap and never run that line; a
    plain `python repro.py` does, and fails. Such statements are commented out,
    each under a note naming what it reads; the bisect needs none of them (the
    symptom is in the training).

    A name is a feature's when a block's ON part reads or binds it and no code
    outside the blocks reads it up to the last training call (binding it there
    is fine: `auc_cb = BatchValAUC(...)` stays; a module, function or class
    the script binds outside the blocks is never one). A tail statement that binds a
    name and is commented out makes that name one too (`h = cb.history`, then
    `print(h[-1])`). The statements looked at are those of the module and of
    each function it defines at its top level (a script that trains inside
    `main()`): a body's own statements after its last training statement, each
    commented out at its own indentation; a function's parameters are never a
    feature's.
    """
    try:
        tree = ast.parse(text)
        blocks = fb.parse(text, path).blocks
    except (SyntaxError, ValueError, fb.UserError):
        return text, []
    if not blocks:
        return text, []
    unmarked = [stmt for stmt in tree.body if _block_of(blocks, stmt.lineno) is None]
    bound: set[str] = set()  # a module, function or class bound outside the blocks is no feature's
    for stmt in unmarked:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
    bodies: list[tuple[list[ast.stmt], set[str]]] = [(tree.body, bound)]
    for stmt in unmarked:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = stmt.args
            params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}
            bodies.append((stmt.body, bound | params))
    lines = fb.split_lines(text)
    got = [c for body, outside in bodies for c in _tail(body, outside, blocks, lines)]
    out = list(lines)  # joined, the text as it was when nothing is commented out
    for c in sorted(got, key=lambda c: c.line, reverse=True):
        indent = " " * c.indent
        body = [fb.comment_line(x, indent) for x in lines[c.line - 1 : c.end]]
        note = indent + NOTE.format(names=", ".join(c.names), features=", ".join(c.features))
        out[c.line - 1 : c.end] = [note, *body]
    return "".join(out), sorted(got, key=lambda c: c.line)


def _block_of(blocks, line: int) -> fb.Block | None:
    return next((b for b in blocks if b.line < line < b.end_line), None)


def _tail(body: list[ast.stmt], outside: set[str], blocks, lines: list[str]) -> list[Commented]:
    """The statements of `body` after its last training statement that read
    a feature's names (`outside`: names that are never a feature's)."""
    called = [
        {n.func.attr for n in ast.walk(s) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        for s in body
    ]
    trained = [i for i, attrs in enumerate(called) if attrs & TRAINING_CALLS]
    if not trained:
        return []
    owners: dict[str, set[str]] = {}  # a feature's name -> the features that read or bind it
    outside = set(outside)
    for stmt in body[: trained[-1] + 1]:
        for n in ast.walk(stmt):
            if not isinstance(n, ast.Name):
                continue
            b = _block_of(blocks, n.lineno)
            if b is not None:
                owners.setdefault(n.id, set()).add(b.name)
            elif isinstance(n.ctx, ast.Load):
                outside.add(n.id)
    made = {name: feats for name, feats in owners.items() if name not in outside}
    got: list[Commented] = []
    tail = body[trained[-1] + 1 :]
    column = body[0].col_offset
    for k, stmt in enumerate(tail):
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        reads = sorted(_names(stmt, ast.Load) & set(made))
        if not reads or any(b.line <= last and first <= b.end_line for b in blocks):
            continue
        shared = (k > 0 and tail[k - 1].end_lineno == first) or (k + 1 < len(tail) and tail[k + 1].lineno == last)
        if shared or stmt.col_offset != column or not lines[first - 1].startswith(" " * column):
            continue  # `a; b` on one line (or a body indented with tabs): left alone
        feats = tuple(sorted(set().union(*(made[n] for n in reads))))
        for name in _names(stmt, ast.Store):
            made.setdefault(name, set(feats))
        got.append(Commented(first, lines[first - 1].strip(), tuple(reads), feats, last, column))
    return got
