"""The feature-block grammar (Contract 1): parse, render, export, set states.

Pure: text in, text out. No file system access; the caller names the path so
errors can say `file:line`.

A block::

    # tfrepro: feature NAME [-- description]
    <part 1: the code when the feature is ON>
    # tfrepro: else                       (optional)
    <part 2: the code when the feature is OFF>
    # tfrepro: end

Invariants kept here:

- Whatever part is inactive is commented: each non-blank line carries `# `
  right after the block's indentation (the indentation of its `feature`
  marker); a line holding only `#` there stands for an empty line.
- `set_states` (and `render`) touch only the parts whose state changes, so
  switching a block and switching it back restores the text byte for byte
  (empty lines inside a part are written as `<indent>#` when commented).
- A live part may hold comments of its own; a live part that also holds a
  commented line which is code (a half-toggled block) is an error.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tfrepro.errors import UserError

NAME_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
_MARKER_RE = re.compile(r"^(?P<indent>[ \t]*)#\s*tfrepro:\s*(?P<rest>.*?)\s*$")
_FEATURE_RE = re.compile(r"^feature(?:\s+(?P<name>\S+))?(?:\s+--\s*(?P<desc>.*))?$")
# Python ends lines at \n, \r\n and \r only (str.splitlines also splits at
# form feeds and other separators, which would shift line numbers).
_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """The lines of a source text, each with its own line ending."""
    return _LINE_RE.findall(text)


def decode_source(data: bytes, path: str = "<bytes>") -> tuple[str, str]:
    """A source file's bytes -> (text, encoding), as Python reads it: a UTF-8
    BOM or a PEP 263 coding line, else UTF-8. Line endings are kept as they
    are, and `text.encode(encoding) == data` is guaranteed (UserError
    otherwise), so a rewrite changes no byte outside what it edits."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        raise UserError(
            f"cannot tell the file's encoding: {e}",
            path=path,
            hint="declare it in the first two lines, e.g. `# -*- coding: utf-8 -*-`",
        ) from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as e:
        raise UserError(
            f"not valid {encoding} text ({e.__class__.__name__}), so not Python source",
            path=path,
            hint="save the file as UTF-8, or declare its real encoding in a `# -*- coding: NAME -*-` line",
        ) from None
    if text.encode(encoding) != data:
        raise UserError(
            f"the file's {encoding} text does not encode back to the same bytes",
            path=path,
            hint="save the file as UTF-8",
        )
    return text, encoding


@dataclass(frozen=True)
class Block:
    """One feature block. Line numbers are 1-based, ranges are 0-based
    half-open indices into the file's lines (marker lines excluded). While
    `parse` reads a block, the fields its `end` marker decides keep their
    defaults."""

    name: str
    description: str
    path: str
    line: int
    indent: str
    else_line: int | None = None
    end_line: int = 0
    on_part: tuple[int, int] = (0, 0)
    off_part: tuple[int, int] | None = None
    state: bool = False  # True when the block is ON as written in the file


def _looks_like_code(text: str) -> bool:
    """True when a commented line's content is a Python statement rather than
    prose: used to catch half-toggled parts without rejecting real comments."""
    try:
        tree = ast.parse(text.strip())
    except SyntaxError:
        return False
    # a bare word ("TODO") is prose, not code
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, (ast.Name, ast.Constant))) for n in tree.body)


def comment_line(line: str, indent: str, *, undo: bool = False) -> str:
    """`line` commented after `indent` (`undo`: uncommented); a blank line
    stands commented as `<indent>#`."""
    body = line.rstrip("\r\n")
    eol = line[len(body) :]
    if not body.strip():
        return line if undo else indent + "#" + eol
    if undo:
        return eol if body == indent + "#" else indent + body[len(indent) + 2 :] + eol
    return indent + "# " + body[len(indent) :] + eol


class SourceFile:
    """A parsed `.py` file: its lines and its blocks (possibly none)."""

    def __init__(self, path: str, text: str, blocks: list[Block], encoding: str = "utf-8") -> None:
        self.path = path
        self.text = text
        self.encoding = encoding  # the file's bytes are text.encode(encoding) (a BOM kept: `utf-8-sig`)
        self.lines = split_lines(text)
        self.blocks = tuple(blocks)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(sorted({b.name for b in self.blocks}))

    def set_states(self, want: Mapping[str, bool], *, export: bool = False) -> str:
        """The file with the named features switched, others as written;
        `export`: standalone (markers and inactive parts removed, `pass`
        where a suite would be left empty)."""
        out: list[str] = []
        pos = 0
        for b in self.blocks:
            out.extend(self.lines[pos : b.line - 1])
            on = want.get(b.name, b.state)
            if export:
                lines = self._part(b, on, live=True)
                # Trim blank lines at the edges of a part: markers often sit between
                # blank lines already, and an exported script should read naturally.
                code = [i for i, x in enumerate(lines) if x.strip()]
                emitted = lines[code[0] : code[-1] + 1] if code else []
                if not emitted and needs_pass(self.lines, b):
                    emitted = [b.indent + "pass\n"]
                out.extend(emitted)
            else:
                out.append(self.lines[b.line - 1])
                out.extend(self._part(b, True, live=on))
                if b.else_line is not None:
                    out.append(self.lines[b.else_line - 1])
                    out.extend(self._part(b, False, live=not on))
                out.append(self.lines[b.end_line - 1])
            pos = b.end_line
        out.extend(self.lines[pos:])
        return "".join(out)

    def _part(self, b: Block, on: bool, *, live: bool) -> list[str]:
        """Block `b`'s ON (`on`) or OFF part, `live` or commented."""
        part = b.on_part if on else b.off_part
        if part is None:
            return []
        lines = self.lines[part[0] : part[1]]
        if (b.state == on) == live:  # live as written (the ON part iff the block is ON): keep the bytes
            return lines
        return [comment_line(x, b.indent, undo=live) for x in lines]

    def render(self, enabled: Iterable[str] | None, *, export: bool = False) -> str:
        """The file with every block ON iff its name is in `enabled` (`None`:
        the states as written), markers kept (line numbers unchanged), or
        `export`ed (`set_states`)."""
        on = set(enabled or ())
        return self.set_states({} if enabled is None else {b.name: b.name in on for b in self.blocks}, export=export)


def _is_code(line: str) -> bool:
    """Neither blank nor a comment."""
    return bool(line.strip()) and not line.strip().startswith("#")


def _indent_width(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def needs_pass(lines: list[str], b: Block) -> bool:
    """Whether removing block `b` entirely leaves a suite empty: the code line
    before it opens a suite and the code line after it is not inside it."""
    before = next(filter(_is_code, reversed(lines[: b.line - 1])), None)
    after = next(filter(_is_code, lines[b.end_line :]), None)
    width = len(b.indent)
    opens = before is not None and _indent_width(before) < width and before.split("#", 1)[0].rstrip().endswith(":")
    return opens and (after is None or _indent_width(after) < width)


def _check_part(path: str, lines: list[str], start: int, stop: int, indent: str, what: str, marker_line: int) -> bool:
    """Validate one part; returns True when it is commented (inactive)."""
    part = lines[start:stop]
    code = [(start + i, x) for i, x in enumerate(part) if x.strip()]
    if not code:
        raise UserError(
            f"the {what} part of this feature block holds no code",
            path=path,
            line=marker_line,
            hint="put the statements the part stands for between the markers, or delete the empty part",
        )
    for i, x in code:
        if not x.rstrip("\r\n").startswith(indent):
            raise UserError(
                "line is indented less than its feature marker",
                path=path,
                line=i + 1,
                hint="indent the feature markers like the code they enclose",
            )
    commented = [x.startswith(indent + "# ") or x.rstrip("\r\n") == indent + "#" for _, x in code]
    if all(commented):
        contents = [comment_line(x, indent, undo=True) for _, x in code]
        if not any(map(_is_code, contents)):
            raise UserError(
                f"the {what} part of this feature block holds no code (only comments)",
                path=path,
                line=marker_line,
                hint="a part must hold at least one statement",
            )
        return True
    # A live part may carry its own comments; a commented *statement* next to
    # live code means the block was half switched by hand.
    for (i, x), c in zip(code, commented):
        if c and _looks_like_code(comment_line(x, indent, undo=True)):
            raise UserError(
                f"the {what} part mixes commented and live code lines",
                path=path,
                line=i + 1,
                hint="comment every line of the inactive part (or none), e.g. with `tfrepro features --set NAME=on`",
            )
    return False


def _opened(path: str, lineno: int, indent: str, rest: str, open_: Block | None) -> Block:
    """The block a `# tfrepro: feature NAME -- description` marker opens."""
    fm = _FEATURE_RE.match(rest)
    name = fm.group("name") if fm else None
    if open_ is not None:
        raise UserError(
            f"feature block {name or '?'!r} opened inside block {open_.name!r} "
            f"(opened at line {open_.line}); blocks do not nest",
            path=path,
            line=lineno,
            hint="close the outer block with `# tfrepro: end` first",
        )
    if not name:
        raise UserError(
            "feature marker without a name",
            path=path,
            line=lineno,
            hint="write `# tfrepro: feature NAME -- description`",
        )
    if not NAME_RE.match(name):
        raise UserError(
            f"bad feature name {name!r}: names match [a-z][a-z0-9_]*",
            path=path,
            line=lineno,
            hint="use lower case letters, digits and underscores, starting with a letter",
        )
    return Block(name, (fm.group("desc") or "").strip(), path, lineno, indent)


def parse(text: str, path: str = "<string>", encoding: str = "utf-8") -> SourceFile:
    """Parse one file into its blocks, validating the whole grammar.

    Raises `UserError` (exit 2) naming `path:line` for: unclosed blocks, a
    stray `else`/`end`, a second `else`, nesting, a bad or missing name, an
    unknown marker keyword, a part without code, a part mixing commented and
    live code, both parts live or both commented.
    """
    lines = split_lines(text)
    blocks: list[Block] = []
    open_: Block | None = None
    for lineno, raw in enumerate(lines, start=1):
        m = _MARKER_RE.match(raw.rstrip("\r\n"))
        if not m:
            continue
        indent, rest = m.group("indent"), m.group("rest")
        keyword = rest.split(None, 1)[0] if rest else ""
        if keyword == "feature":
            open_ = _opened(path, lineno, indent, rest, open_)
        elif rest in ("else", "end") and open_ is None:
            raise UserError(
                f"`# tfrepro: {rest}` outside any feature block",
                path=path,
                line=lineno,
                hint="remove it, or open a block with `# tfrepro: feature NAME` before it",
            )
        elif rest == "else":
            if open_.else_line is not None:
                raise UserError(
                    f"second `else` in feature block {open_.name!r} (first at line {open_.else_line})",
                    path=path,
                    line=lineno,
                    hint="a block has at most two parts",
                )
            open_ = replace(open_, else_line=lineno)
        elif rest == "end":
            blocks.append(_close(lines, open_, lineno))
            open_ = None
        else:
            raise UserError(
                f"unknown tfrepro marker {rest!r}",
                path=path,
                line=lineno,
                hint="markers are `# tfrepro: feature NAME -- description`, `# tfrepro: else`, `# tfrepro: end`",
            )
    if open_ is not None:
        raise UserError(
            f"feature block {open_.name!r} is never closed",
            path=path,
            line=open_.line,
            hint="add `# tfrepro: end` after the block's code",
        )
    return SourceFile(path, text, blocks, encoding)


def _close(lines: list[str], o: Block, end_line: int) -> Block:
    """Block `o` closed at `end_line`: its parts validated, its state as written."""
    on_stop = (o.else_line or end_line) - 1  # the ON part starts after the feature marker
    on_commented = _check_part(o.path, lines, o.line, on_stop, o.indent, "ON", o.line)
    off_part = None if o.else_line is None else (o.else_line, end_line - 1)
    if off_part is not None:
        off_commented = _check_part(o.path, lines, *off_part, o.indent, "OFF", o.else_line)
        if on_commented == off_commented:
            both = "commented" if on_commented else "live"
            raise UserError(
                f"both parts of feature block {o.name!r} are {both}",
                path=o.path,
                line=o.line,
                hint="exactly one part is live: comment the inactive one with `# `",
            )
    return replace(o, end_line=end_line, on_part=(o.line, on_stop), off_part=off_part, state=not on_commented)
