"""`tfrepro annotate`: find the engineering features of an existing training
script and write them as feature blocks (Contract 1), every block ON.

Invariants:
- The annotated file, as written, runs exactly as the original: each ON part
  is the original code or code computing the same values in the same order.
- Nothing is half-edited: an edit that does not pass every check of
  `build` is dropped whole and reported with file:line. The checks, for
  every file: the result parses under the Contract 1 grammar
  (`tfrepro.features.parse`) with every new block ON, rendering all
  features ON gives the file back byte for byte, and the file compiles with
  each new feature OFF and with all of them OFF.
- Running it on its own output changes nothing (code inside existing blocks is
  never touched; grouped names already used are skipped).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tfrepro import features as fb
from tfrepro.annotate.model import BlockSeg, Context, Edit, Found, Skipped
from tfrepro.errors import UserError
from tfrepro.projectfiles import MANIFEST

if TYPE_CHECKING:
    from tfrepro.annotate.custom import LayerClass
    from tfrepro.annotate.source import Src

__all__ = ["Annotation", "Detection", "FileResult", "Found", "Skipped", "annotate", "annotate_text", "detect_blocks"]


@dataclass(frozen=True)
class FileResult:
    path: Path
    original: str | None  # None: a new file (the manifest)
    annotated: str
    found: tuple[Found, ...]
    encoding: str = "utf-8"  # the file's own (`features.decode_source`): a BOM, a PEP 263 line

    @property
    def changed(self) -> bool:
        return self.annotated != self.original


@dataclass(frozen=True)
class Annotation:
    files: tuple[FileResult, ...]
    skipped: tuple[Skipped, ...]
    manifest: FileResult | None = None  # tfrepro.toml, when it changes
    problems: tuple[str, ...] = ()

    @property
    def found(self) -> tuple[Found, ...]:
        return tuple(f for r in self.files for f in r.found)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(sorted({f.name for f in self.found}))

    def diff(self) -> str:
        """A unified diff of every change (files, then the manifest)."""
        changed = [r for r in (*self.files, self.manifest) if r is not None and r.changed]
        return "".join(_diff(r.original, r.annotated, relpath(r.path, Path.cwd())) for r in changed)

    def write(self) -> list[Path]:
        """Write the changes in place, through links (a symlinked or hard-linked
        script is annotated in its real file, the link kept), each in the
        file's own encoding; returns the paths written."""
        from tfrepro.projectfiles import write_in_place

        written = []
        for r in (*self.files, self.manifest):
            if r is None or not r.changed:
                continue
            try:
                data = r.annotated.encode(r.encoding)
            except UnicodeEncodeError:
                raise UserError(
                    f"the annotated text cannot be written in the file's {r.encoding} encoding",
                    path=r.path,
                    hint="save the file as UTF-8 and run annotate again",
                ) from None
            if r.path.exists():
                write_in_place(r.path, data)
            else:  # a new file: written whole beside it, then renamed into place
                tmp = r.path.with_name(r.path.name + ".tfrepro-tmp")
                tmp.write_bytes(data)
                os.replace(tmp, r.path)
            written.append(r.path)
        return written


def relpath(path: str | Path, root: Path) -> str:
    """`path` relative to `root` (both resolved), or as given when it is not under `root`."""
    p = Path(path).resolve()
    return p.relative_to(root.resolve()).as_posix() if p.is_relative_to(root.resolve()) else str(path)


def _diff(old: str | None, new: str, name: str) -> str:
    """A unified diff; `old is None`: a new file."""
    a, b = (name, name) if name.startswith("/") else (f"a/{name}", f"b/{name}")
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True), new.splitlines(keepends=True), "/dev/null" if old is None else a, b
    )
    return "".join(x if x.endswith("\n") else x + "\n\\ No newline at end of file\n" for x in lines)


def annotate_text(
    text: str,
    path: str = "<string>",
    *,
    only: Iterable[str] | None = None,
    layer_classes: dict[str, LayerClass] | None = None,
    ctx: Context | None = None,
    src: Src | None = None,
) -> tuple[str, tuple[Found, ...], tuple[Skipped, ...]]:
    """Annotate one file's text. `layer_classes`: the project's own Layer
    subclasses as this file sees them (`annotate` collects them over the
    project's files); None: those the file itself defines. `src`: the text
    parsed already, with "\n" line ends (`annotate` parses each file once)."""
    from tfrepro.annotate.custom import class_defs, collect_layer_classes
    from tfrepro.annotate.detect import candidates_to_edits, find_candidates
    from tfrepro.annotate.loops import loop_edits
    from tfrepro.annotate.rebuild import callback_edits, chain_edits
    from tfrepro.annotate.source import Src

    existing = fb.parse(text, path)  # validates markers already there (exit 2)
    # Work on "\n" lines; a file written with "\r\n" throughout gets them back.
    original, (text, crlf) = text, _lf(text)
    src = src or Src(text, path)
    if ctx is None:
        ctx = Context(existing=frozenset(existing.feature_names), only=frozenset(only) if only is not None else None)
    if layer_classes is None:
        layer_classes = collect_layer_classes(class_defs(src))
    ctx.occupied[path] = [(b.line, b.end_line) for b in existing.blocks]
    edits = loop_edits(src, ctx)  # first: a loop's block wins over the statements inside it
    edits += chain_edits(src, ctx) + callback_edits(src, ctx)
    edits += candidates_to_edits(src, ctx, find_candidates(src, layer_classes, ctx))
    edits = resolve_overlaps(edits, ctx, path)
    new, kept = build(text, path, edits, ctx)
    new = original if not kept else (new.replace("\n", "\r\n") if crlf else new)
    found = tuple(f for e in kept for f in e.found)
    skipped = tuple(s for s in ctx.skipped if s.path == path)
    return new, found, skipped


def _lf(text: str) -> tuple[str, bool]:
    """`text` with "\n" line ends, and whether it was written with "\r\n" throughout."""
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    return (text.replace("\r\n", "\n") if crlf else text), crlf


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    from tfrepro.projectfiles import iter_project_files

    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError("no such file or directory", path=p, hint="give the training script(s) to annotate")
        if p.is_dir():
            out.extend(p / rel for rel in iter_project_files(p) if rel.suffix == ".py")
        elif p.suffix != ".py":
            raise UserError("not a Python file", path=p, hint="annotate reads .py training scripts")
        else:
            out.append(p)
    seen: dict[Path, Path] = {}  # each file once, as first named
    return [seen.setdefault(p.resolve(), p) for p in out if p.resolve() not in seen]


def annotate(paths: Iterable[str | Path], *, only: Iterable[str] | None = None) -> Annotation:
    """Annotate files (nothing is written: see `Annotation.write`/`.diff`).

    Raises UserError (exit 2) for a missing file, a syntax error, or malformed
    markers already in a file.
    """
    from tfrepro.annotate.custom import class_defs, collect_layer_classes
    from tfrepro.annotate.source import Src
    from tfrepro.projectfiles import find_root

    files = _expand(paths)
    if not files:
        raise UserError("no Python files to annotate", hint="give the training script(s)")
    texts: dict[Path, str] = {}
    encodings: dict[Path, str] = {}
    srcs: dict[Path, Src] = {}
    existing: set[str] = set()
    for p in files:
        # As Python reads it (a BOM, a `coding:` line), "\r\n" kept as written.
        texts[p], encodings[p] = fb.decode_source(p.read_bytes(), str(p))
        srcs[p] = Src(_lf(texts[p])[0], str(p))  # a syntax error: exit 2 before anything is annotated
        existing.update(fb.parse(texts[p], str(p)).feature_names)
    # Each file is parsed once, for its class statements and its own recognisers;
    # each script sees its own Layer classes first, then those of the other files.
    defs = {q: class_defs(s) for q, s in _layer_srcs(files, srcs).items()}
    ctx = Context(existing=frozenset(existing), only=frozenset(only) if only is not None else None)
    results = []
    for p in files:
        classes = collect_layer_classes([*defs[p], *(d for q, ds in defs.items() if q != p for d in ds)])
        new, found, _ = annotate_text(texts[p], str(p), layer_classes=classes, ctx=ctx, src=srcs[p])
        results.append(FileResult(p, texts[p], new, found, encodings[p]))

    # The project `tfrepro bisect` will load these files as (one root for
    # every mode and command: projectfiles.find_root).
    root = find_root(Path(os.path.commonpath([str(p.resolve().parent) for p in files])) / "_.py")
    mpath = root / MANIFEST
    original = mpath.read_bytes().decode("utf-8") if mpath.is_file() else None  # "\r\n" kept as written
    affects = [f.name for r in results for f in r.found if f.affects_loss]
    # `tfrepro bisect` in that directory must find the script to run: the
    # one with a `__main__` guard, else the first.
    main = next((r for r in results if "__name__" in r.original and "__main__" in r.original), results[0])
    entry = p.relative_to(root).as_posix() if (p := main.path.resolve()).is_relative_to(root) else None
    if not any(r.found for r in results) or entry == "repro.py" or (original is None and (root / "repro.py").is_file()):
        entry = None
    new_manifest, problems = merge(original, affects, entry)
    manifest = FileResult(mpath, original, new_manifest, ()) if new_manifest is not None else None
    return Annotation(tuple(results), tuple(ctx.skipped), manifest, tuple(problems))


def _layer_srcs(files: list[Path], srcs: dict[Path, Src]) -> dict[Path, Src]:
    """The scripts and every other Python file next to them: Layer classes may
    be defined in any of them (a sibling that cannot be read or parsed only
    loses its classes)."""
    from tfrepro.annotate.source import Src

    out = dict(srcs)
    seen = {p.resolve() for p in out}
    for d in sorted({p.parent for p in files}):
        for q in sorted(d.glob("*.py")):
            if q.resolve() not in seen:
                seen.add(q.resolve())
                try:
                    out[q] = Src(fb.decode_source(q.read_bytes(), str(q))[0], str(q))
                except (OSError, UserError):
                    continue
    return out


# -- tfrepro.toml: `affects_loss = true` features declared without ever
# destroying what the user wrote: the text is edited by lines, then read back
# with tomllib and compared with the intended data; anything else is a problem
# reported to the user, and the file is left alone.
_HEADER = (
    "# Written by `tfrepro annotate`: the script a trial runs, and the features that\n"
    "# change the loss on purpose (never blamed for a loss mismatch).\n"
)


def _under(text: str, table: str, line: str) -> str | None:
    """`line` added right under the `[table]` header (its dotted parts may
    be spaced, a comment may follow it), None when there is no such header."""
    parts = r"[ \t]*\.[ \t]*".join(map(re.escape, table.split(".")))
    m = re.search(r"^[ \t]*\[[ \t]*" + parts + r"[ \t]*\][ \t]*(#.*)?$", text, re.M)
    return None if m is None else text[: m.end()] + "\n" + line + text[m.end() :]


def merge(existing: str | None, affects_loss: list[str], entry: str | None) -> tuple[str | None, list[str]]:
    """(new manifest text or None when nothing changes, problems).

    `entry`: the script trials should run, written as `[trial] entry` when the
    manifest says neither `entry` nor `command` (None: leave [trial] alone)."""
    names = sorted(set(affects_loss))
    if not names and not entry:
        return None, []
    try:
        data = tomllib.loads(existing or "")  # None: a new file, written below its header
    except tomllib.TOMLDecodeError as e:
        return None, [f"{MANIFEST} is not valid TOML ({e}); add affects_loss = true for {', '.join(names)} by hand"]
    if not isinstance(feats := data.get("features", {}), dict):
        return None, [f"{MANIFEST}: `features` is not a table; left alone"]
    problems: list[str] = []
    want = copy.deepcopy(data)
    text = _HEADER if existing is None else existing
    trial = data.get("trial", {})
    if entry and isinstance(trial, dict) and "entry" not in trial and "command" not in trial:
        want.setdefault("trial", {})["entry"] = entry
        line = f'entry = "{entry}"'
        table = f"[trial]\n{line}\n"  # a new [trial] table first (in a new file, after the header)
        text = _under(text, "trial", line) or (text + "\n" + table if existing is None else table + "\n" + text)
    for n in names:
        cfg = feats.get(n)
        if isinstance(cfg, dict) and "affects_loss" in cfg:
            if cfg["affects_loss"] is not True:
                problems.append(
                    f"{MANIFEST} says affects_loss = {cfg['affects_loss']!r} for {n}; "
                    "left as is (the annotator would have said true)"
                )
            continue
        want.setdefault("features", {}).setdefault(n, {})["affects_loss"] = True
        table = ("" if text.endswith("\n") else "\n") + f"\n[features.{n}]\naffects_loss = true\n"  # a new one last
        text = _under(text, f"features.{n}", "affects_loss = true") or text + table
    if text == existing:
        return None, problems
    try:
        if tomllib.loads(text) != want:
            raise ValueError
    except (tomllib.TOMLDecodeError, ValueError):
        what = ", ".join([f"affects_loss = true for {n}" for n in names] + ([f'entry = "{entry}"'] if entry else []))
        return None, problems + [f"could not add {what} to {MANIFEST} safely; add it by hand"]
    return text, problems


# -- the edits written, and proved safe before anyone sees them ------------------------


def apply(lines: list[str], edits: list[Edit]) -> tuple[str, dict[int, tuple[int, BlockSeg]], list[tuple[int, int]]]:
    """The new text; per marker line of a new block, (edit index, segment);
    per edit (sorted by start), the range of new lines it wrote."""
    out: list[str] = []
    markers: dict[int, tuple[int, BlockSeg]] = {}
    ranges: list[tuple[int, int]] = []
    pos = 0
    for i, e in enumerate(sorted(edits, key=lambda e: e.start)):
        out.extend(lines[pos : e.start - 1])
        first = len(out) + 1
        for seg in e.segments:
            if isinstance(seg, BlockSeg):
                markers[len(out) + 1] = (i, seg)
                desc = f" -- {seg.found.description}" if seg.found.description else ""
                out += [f"{e.indent}# tfrepro: feature {seg.found.name}{desc}\n", *seg.on.splitlines(keepends=True)]
                if seg.off is not None:
                    out.append(f"{e.indent}# tfrepro: else\n")
                    out.extend(fb.comment_line(x, e.indent) for x in seg.off.splitlines(keepends=True))
                out.append(f"{e.indent}# tfrepro: end\n")
            else:
                out.extend(seg.splitlines(keepends=True))
        ranges.append((first, len(out)))
        pos = e.end
    out.extend(lines[pos:])
    return "".join(out), markers, ranges


def resolve_overlaps(edits: list[Edit], ctx: Context, path: str) -> list[Edit]:
    """Drop edits inside existing blocks (already annotated: silently) and
    edits overlapping an earlier one (reported)."""
    kept: list[Edit] = []
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        if any(a <= e.end and e.start <= b for a, b in ctx.occupied[path]):
            continue
        clash = next((k for k in kept if k.start <= e.end and e.start <= k.end), None)
        if clash is not None:
            for f in e.found:
                ctx.skip(
                    path, f.line, f"{f.name} touches the same lines as {', '.join(sorted(clash.names))}: not marked"
                )
            continue
        kept.append(e)
    return kept


def _compiles(text: str, path: str) -> bool:
    try:
        compile(text, path, "exec", flags=0x400, dont_inherit=True)
        return True
    except SyntaxError:
        return False


def _bad_names(parsed: fb.SourceFile, markers: dict[int, tuple[int, BlockSeg]], new: str, path: str) -> set[str]:
    """The features our blocks in `new` may not keep: a block that does not
    parse as switched, a file that does not round-trip, or one that does not
    compile with a feature (or all of ours) switched off."""
    ours = {seg.found.name for _, seg in markers.values()}
    names = set(parsed.feature_names)
    bad = {b.name for b in parsed.blocks if b.line in markers and not b.state}
    if parsed.render(names) != new:
        bad |= ours
    bad |= {n for n in ours - bad if not _compiles(parsed.render(names - {n}), path)}
    if not bad and not _compiles(parsed.render(names - ours), path):
        bad |= ours
    return bad


def build(text: str, path: str, edits: list[Edit], ctx: Context) -> tuple[str, list[Edit]]:
    """The annotated text and the edits it holds, every check passed."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"  # a block may follow the last line
    edits = sorted(edits, key=lambda e: e.start)
    for _ in range(len(edits) + 2):
        if not edits:
            return text, []
        new, markers, ranges = apply(lines, edits)
        try:
            parsed = fb.parse(new, path)
        except UserError as err:
            # E.g. a commented-out statement inside the wrapped code reads as
            # a half-switched block: drop the edit holding the line.
            hit = [i for i, (a, b) in enumerate(ranges) if err.line is not None and a <= err.line <= b]
            for i in hit or range(len(edits)):
                for f in edits[i].found:
                    ctx.skip(path, f.line, f"{f.name}: not marked, the block would not be valid ({err.message})")
            if not hit:
                return text, []
            edits = [e for i, e in enumerate(edits) if i not in hit]
            continue
        # A block without an else part that is alone in its suite would leave
        # the suite empty when OFF: give it `pass` as its OFF part.
        new_lines = new.splitlines(keepends=True)
        empty = [b for b in parsed.blocks if b.line in markers and b.off_part is None and fb.needs_pass(new_lines, b)]
        for i, seg in (markers[b.line] for b in empty):
            e = edits[i]
            edits[i] = replace(
                e, segments=tuple(replace(s, off=f"{e.indent}pass\n") if s is seg else s for s in e.segments)
            )
        if empty:
            continue
        bad = _bad_names(parsed, markers, new, path)
        if not bad:
            return new, edits
        for e in edits:
            culprit = ", ".join(sorted(e.names & bad))
            why = f"not marked (the file would not compile, or not round-trip, with {culprit} switched off)"
            for f in e.found if culprit else ():
                ctx.skip(path, f.line, f"{f.name}: {why}")
        edits = [e for e in edits if not e.names & bad]
    return text, []  # pragma: no cover - each round removes an edit or returns


# -- zero-edit mode: the feature blocks of an unmarked project, found by the
# recognisers above and kept in memory (nothing is written to the user's
# files). `Project.load` calls `detect_blocks` (its zero-edit branch)
# when no file of the project has a marker; trials then render their variants
# from the annotated texts.
#
# Which files: the trial's entry script and the project modules it imports
# (transitively, as `import x` / `from x import y` resolve from the script's
# directory or the project root); when the entry is unknown, every `.py` file
# that is not a test.


@dataclass(frozen=True)
class Detection:
    texts: dict[str, str]  # relpath -> annotated text (only files that changed)
    found: tuple[Found, ...]  # Found.path is the relpath, Found.line a line of the original file
    skipped: tuple[Skipped, ...]

    @property
    def affects_loss(self) -> frozenset[str]:
        return frozenset(f.name for f in self.found if f.affects_loss)


def entry_scripts(entry: str | None, command: Sequence[str] | None, files: Iterable[str]) -> list[str]:
    """The project's entry scripts (relpaths) from `[trial] entry` or `command`."""
    known = set(files)
    if command is None:
        return [entry] if entry in known else []
    out = [c for c in command if c.endswith(".py") and c in known]
    for i, c in enumerate(command[:-1]):
        if c == "-m":
            mod = command[i + 1].replace(".", "/")
            out += [m for m in (f"{mod}.py", f"{mod}/__main__.py") if m in known]
    return out


def default_targets(files: Iterable[str]) -> list[str]:
    """Every `.py` file that is not a test (when the entry is unknown)."""
    return [
        f
        for f in files
        if f.endswith(".py") and not f.startswith("tests/") and not Path(f).name.startswith(("test_", "conftest"))
    ]


def detect_blocks(root: Path, targets: Sequence[str]) -> Detection:
    """Run the annotator over `targets` (relpaths under `root`) in memory."""
    if not targets:
        return Detection({}, (), ())
    result = annotate([root / t for t in targets])
    rel = {r.path: relpath(r.path, root) for r in result.files}
    texts = {rel[r.path]: r.annotated for r in result.files if r.changed}
    found = tuple(replace(f, path=rel[r.path]) for r in result.files for f in r.found)
    return Detection(texts, found, tuple(replace(s, path=relpath(s.path, root)) for s in result.skipped))
