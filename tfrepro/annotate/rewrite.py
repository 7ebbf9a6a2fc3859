"""Turn edits into the annotated text, and prove it safe before anyone sees it.

Checks, for every file: the result parses under the Contract 1 grammar
(`tfrepro.features.parse`) with every new block ON, rendering all features ON
gives the file back byte for byte, and the file compiles with each new
feature OFF and with all of them OFF. An edit that fails is dropped whole
(never half-applied) and reported.
"""

from __future__ import annotations

from dataclasses import replace

from tfrepro import features as fb
from tfrepro.annotate.model import BlockSeg, Context, Edit
from tfrepro.errors import UserError


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
