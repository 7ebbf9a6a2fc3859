"""Data stand-ins: the exported repro reads synthetic data, not the user's files.

The harness recorded what each data read returned (inside/harness_data.py:
`data.sources`, each with the call, the file, the script's file:line, and
for an array or a DataFrame its shape, dtypes and per-column statistics).
Here each such call in the exported repro.py (`np.load(...)`,
`np.loadtxt(...)`, `np.genfromtxt(...)`, `pd.read_csv(...)`, ...) is
rewritten (libcst) into `_tfrepro_data(i)`: seeded NumPy data of the
recorded shape, dtype and statistics (min/max-clipped normal of the
recorded mean and std, the recorded fraction of zeros, NaN and Inf counts
scaled to the rows, the distinct values of integer, bool and string
columns). The report re-runs the repro to check that the stand-in still
shows the symptom; if not, the original export is kept and ISSUE.md says
which files the repro needs.

A read the recorder saw but cannot stand in for (a TFRecord file, an image
folder, an .npz archive, open()) is named with its file:line: the repro
needs that data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import libcst as cst
import libcst.matchers as m

from tfrepro.annotate.source import last_name
from tfrepro.report.answer import of
from tfrepro.report.records import DataDoc, ResultJson
from tfrepro.trials.values import evidence_doc

if TYPE_CHECKING:
    from tfrepro.report.reduce import Reduction

# call recorded by the harness -> the function name the exported source calls
STANDABLE = {
    "numpy.load": "load",
    "numpy.loadtxt": "loadtxt",
    "numpy.genfromtxt": "genfromtxt",
    "pandas.read_csv": "read_csv",
    "pandas.read_table": "read_table",
    "pandas.read_parquet": "read_parquet",
    "pandas.read_json": "read_json",
    "pandas.read_feather": "read_feather",
}

# What `rewrite` inserts: statements only (`swap_reads` takes a parsed module's body, no leading comment).
HEADER = """
import numpy as _tfrepro_np

_TFREPRO_DATA = json_specs


def _tfrepro_column(rng, n, s):
    dtype = s.get("dtype") or "float32"
    if s.get("distinct"):
        out = rng.choice(_tfrepro_np.array(s["distinct"]), size=n)
    elif s.get("min") is None:
        out = _tfrepro_np.full(n, _tfrepro_np.nan)
    else:
        out = rng.normal(s["mean"], s["std"] or 0.0, size=n).clip(s["min"], s["max"])
        zeros = int(round(s.get("zero_frac", 0.0) * n))
        if zeros:
            out[rng.choice(n, zeros, replace=False)] = 0.0
    count = max(1, s.get("count") or n)
    for key, value in (("nan", _tfrepro_np.nan), ("inf", _tfrepro_np.inf)):
        k = min(n, int(_tfrepro_np.ceil(s.get(key, 0) * n / count)))
        if k and out.dtype.kind == "f":
            out[rng.choice(n, k, replace=False)] = value
    if dtype[0] in "iu" or dtype.startswith(("int", "uint")):
        out = _tfrepro_np.rint(out)
    return out.astype(dtype) if dtype != "object" else out


def _tfrepro_data(i):
    spec = _TFREPRO_DATA[i]
    rng = _tfrepro_np.random.default_rng(i)
    cols = spec["columns"]
    if spec["type"] == "dataframe":
        import pandas

        return pandas.DataFrame({c: _tfrepro_column(rng, spec["rows"], s) for c, s in cols.items()})
    shape = tuple(spec["shape"])
    if len(shape) == 2 and len(cols) == shape[1]:
        return _tfrepro_np.stack([_tfrepro_column(rng, shape[0], s) for s in cols.values()], axis=1)
    n = int(_tfrepro_np.prod(shape)) if shape else 1
    return _tfrepro_column(rng, n, next(iter(cols.values()))).reshape(shape)
"""


@dataclass(frozen=True)
class Read:
    """One data read the harness recorded (`records.DataDoc`'s sources): the call, the file, the
    script's file:line; `value` the spec of what it returned, the stand-in's recipe."""

    call: str | None = None
    file: str | None = None
    at: str | None = None
    value: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The read as report.json names it."""
        v = self.value or {}
        shape = v.get("shape") or ([v["rows"], len(v.get("columns") or {})] if "rows" in v else None)
        return {"call": self.call, "file": self.file, "at": self.at, "shape": shape}


def named(reads: Sequence[Read]) -> str:
    """The files of `reads`, each with the script's file:line, for a line of text."""
    return ", ".join(f"{s.file} ({s.at})" for s in reads) or "(none)"


@dataclass(frozen=True)
class DataFacts:
    """report.json's `data`: the reads recorded, those repro.py reads
    stand-ins for and those it still needs, the fits fed by data no read
    explains; then what the re-runs said: `standin_reproduced` (once the
    stand-ins were re-run: `rerun`) and the real-data `reduction`."""

    sources: tuple[Read, ...] = ()
    standins: tuple[Read, ...] = ()
    needs_user_data: tuple[Read, ...] = ()
    unseen: tuple[str, ...] = ()
    rerun: bool = False
    standin_reproduced: bool | None = None
    note: str | None = None  # after standin_reproduced: report.json's key order
    reduction: Reduction | None = None

    @property
    def kind(self) -> str:
        """What the repro reads: "reduced" (data.npz), "standins", "user" (the user's files) or "none"."""
        if self.reduction is not None and self.reduction.error is None:
            return "reduced"
        if self.standins:
            return "standins"
        return "user" if self.needs_user_data else "none"

    def to_dict(self) -> dict[str, object]:
        """Every field, `note` and `reduction` where there is one, `standin_reproduced` once re-run."""
        skip = {"rerun"} if self.rerun else {"rerun", "standin_reproduced"}
        return evidence_doc(self, frozenset({"note", "reduction"}), frozenset(skip))


def _literal_file(call: cst.Call) -> str | None:
    """The basename of a string-literal first argument, or None."""
    if call.args and isinstance(call.args[0].value, cst.SimpleString):
        with suppress(Exception):
            return str(call.args[0].value.evaluated_value).replace("\\", "/").rsplit("/", 1)[-1]
    return None


_FUTURE = m.SimpleStatementLine(body=[m.ImportFrom(module=m.Name("__future__")), m.ZeroOrMore()])
_DOC = m.SimpleStatementLine(body=[m.Expr(m.SimpleString()), m.ZeroOrMore()])  # a module's docstring

# What a matched read call becomes: (n, its site, the call) -> the new
# expression, or None (left as it is); n counts the calls swapped before it.
Swap = Callable[[int, Read, cst.Call], "cst.BaseExpression | None"]


class _Sites(cst.CSTTransformer):
    """Every recorded site, in order, takes the next call of its function (a
    call whose literal file names another file is not it) and `swap` says
    what that call becomes."""

    def __init__(self, sites: Sequence[Read], names: Mapping[str, str], swap: Swap) -> None:
        self.todo = [(i, names.get(s.call or ""), s) for i, s in enumerate(sites)]
        self.swap = swap
        self.done: list[int] = []

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name, lit = last_name(original.func), _literal_file(original)
        for k, (i, want, site) in enumerate(self.todo):
            if want != name or (lit is not None and lit != str(site.file or "").rsplit("/", 1)[-1]):
                continue
            del self.todo[: k + 1]  # sites keep their order
            new = self.swap(len(self.done), site, updated)
            if new is not None:
                self.done.append(i)
            return updated if new is None else new
        return updated


def swap_reads(
    text: str, sites: Sequence[Read], names: Mapping[str, str], swap: Swap, header: Callable[[list[int]], str]
) -> tuple[str, list[int]]:
    """`text` with the read calls of `sites` swapped (`_Sites`; `names`: the
    recorded call -> the function the source calls) and `header(swapped)`
    inserted -> (the new text, the indices of the sites swapped); the text
    as it was when none was."""
    tr = _Sites(sites, names, swap)
    module = cst.parse_module(text).visit(tr)
    if not tr.done:
        return text, []
    body = list(module.body)
    # the header goes after the docstring and the `from __future__` imports
    at = max((i + 1 for i, s in enumerate(body) if m.matches(s, _FUTURE) or i == 0 and m.matches(s, _DOC)), default=0)
    body[at:at] = cst.parse_module(header(tr.done)).body
    return module.with_changes(body=body).code, tr.done


def rewrite(text: str, sites: list[Read]) -> tuple[str, list[Read]]:
    """`text` with the standable reads of `sites` replaced -> (new text, the sites replaced)."""
    usable = [s for s in sites if s.call in STANDABLE]
    if not any(isinstance(s.value, dict) for s in usable):
        return text, []

    def data(n: int, site: Read, call: cst.Call) -> cst.BaseExpression | None:
        return cst.parse_expression(f"_tfrepro_data({n})") if isinstance(site.value, dict) else None

    def specs(done: list[int]) -> str:
        return HEADER.replace("json_specs", repr([usable[i].value for i in done]))

    text, done = swap_reads(text, usable, STANDABLE, data, specs)
    return text, [usable[i] for i in done]


def _data(result: ResultJson, *keys: str) -> DataDoc:
    """The culprit trial's data record, else the failing trial's: the first that has one of `keys`."""
    for key in ("culprit_trial", "failing"):
        data = (result.get(key) or {}).get("data") or {}
        if any(data.get(k) for k in keys):
            return data
    return {}


def recorded(result: ResultJson, entry: str) -> tuple[DataFacts, list[Read], int | None]:
    """What the failing configuration's trial recorded: the facts before any
    stand-in (every read needs the user's data; `unseen`: file:line of each
    fit fed by data no recorded read explains, a reader the hooks cannot
    see), the reads of `entry` (one per call site, its first read, in line
    order) and the first fit's batches per epoch (the reduction's chunk count)."""
    data = _data(result, "sources", "fits")
    sources = tuple(of(Read, s) or Read() for s in data.get("sources") or [])
    fits = _data(result, "fits").get("fits") or []
    unseen = tuple(str(f.get("at")) for f in fits if not f.get("sources_seen") and f.get("kind") != "arrays")
    firsts = {str(s.at): s for s in reversed(sources) if str(s.at or "").rsplit(":", 1)[0] == entry}
    sites = sorted(firsts.values(), key=lambda s: int(str(s.at).rsplit(":", 1)[1]))
    batches = (data.get("fits") or [{}])[0].get("batches_per_epoch")
    return DataFacts(sources, needs_user_data=sources, unseen=unseen), sites, batches


def issue_lines(data: dict[str, Any]) -> list[str]:
    """ISSUE.md's "Data" section from report.json's `data` (`DataFacts.to_dict`): what the repro reads instead
    of the user's files, and what it still needs."""
    if not (data.get("standins") or data.get("needs_user_data") or data.get("unseen") or data.get("reduction")):
        return []
    out = ["### Data", ""]

    def line(s: dict[str, Any]) -> str:
        shape = "x".join(str(d) for d in s.get("shape") or []) or "?"
        return f"- `{s.get('file')}` ({s.get('call')} at {s.get('at')}, {shape})"

    if data.get("standins"):
        state = {True: "and it still shows the symptom", False: "but it did NOT show the symptom"}.get(
            data.get("standin_reproduced"), "(not re-run)"
        )
        out += [f"repro.py reads seeded synthetic stand-ins of the recorded shape and statistics, {state}:"]
        out += [*map(line, data["standins"]), ""]
    red = data.get("reduction") or {}
    if red.get("records"):
        files = ", ".join(f"`{f['file']}`" for f in red.get("files") or [])
        out.append(
            f"No synthetic stand-in showed the symptom: data.npz holds {red['records']} of the {red['of']} "
            f"records of {files} (found by delta debugging over the records, {red.get('tests')} re-runs); "
            "repro.py reads them through temp files of the original format."
        )
        out.append("")
    elif red.get("error"):
        out.extend([f"The data could not be reduced: {red['error']}.", ""])
    if data.get("needs_user_data"):
        out += ["The repro needs the user's data (not shipped):", *map(line, data["needs_user_data"]), ""]
    for fit in data.get("unseen") or []:
        out.append(
            f"- the data `Model.fit` trains on at {fit} comes from a source tfrepro cannot see "
            "(no file read was recorded): the repro needs it."
        )
    if data.get("unseen"):
        out.append("")
    if data.get("note"):
        out.extend([data["note"], ""])
    return out
