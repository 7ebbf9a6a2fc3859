"""Real-data reduction: when synthetic stand-ins do not show the symptom.

The repro keeps reading real records, but only the few that still show it:
ddmin (`trials/ddmin.py`, the search's own) first over batch-sized chunks of
the records the failing run read, then over the records of the smallest
failing chunk set, each candidate tested by re-running the repro (the
injected `test`). The records left go to `data.npz`; each read call of the
repro gets `_tfrepro_file(i)` instead of the user's path: a temp file of the
same format holding those records, so the script's own reading code (its
delimiter, header, parsing) runs unchanged.

`choose_data` (below) is the one data pipeline `tfrepro report` (rerun.py `with_data`)
and `tfrepro new --from` (newfrom.py) both run.

Record formats: `.npy` (rows), text (lines; the first line, a possible
header, always kept), TFRecord (framed records; written back with their
CRC32C). Files of the same record count are reduced together (x.npy and
y.npy keep the same rows). A reduction that keeps more than `MAX_SHARE` of
the records (or `MAX_RECORDS`) is refused: a data file is never shipped whole.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import libcst as cst
import numpy as np

from tfrepro.report.export import ENTRY, Export
from tfrepro.report.records import ResultJson
from tfrepro.report.standin import (
    STANDABLE,
    DataFacts,
    Read,
    named,
    recorded,
    rewrite,
    swap_reads,
)
from tfrepro.trials.ddmin import Oracle, ddmin

MAX_SHARE = 0.1
MAX_RECORDS = 1000
TEXT_CALLS = {"numpy.loadtxt", "numpy.genfromtxt", "pandas.read_csv", "pandas.read_table"}
# call recorded by the harness -> the function name the exported source calls
CALL_NAMES = {c: STANDABLE[c] for c in ("numpy.load", *TEXT_CALLS)} | {"tf.data.TFRecordDataset": "TFRecordDataset"}
Check = Callable[[Export], "bool | None"]  # re-runs an export: did it show the symptom? (None: not re-run)


@dataclass
class Records:
    """One data file's records, read in the report process."""

    site: Read
    kind: str  # "npy" | "text" | "tfrecord"
    suffix: str
    items: Any  # the rows (npy: the array), lines or record payloads
    header: bytes = b""

    def subset(self, keep: list[int]) -> dict[str, np.ndarray]:
        if self.kind == "npy":
            return {"rows": np.asarray(self.items)[keep]}
        parts = ([self.header] if self.header else []) + [self.items[i] for i in keep]
        offsets = np.cumsum([0] + [len(p) for p in parts]).astype(np.int64)
        return {"data": np.frombuffer(b"".join(parts), dtype=np.uint8), "offsets": offsets}


def read_records(root: Path, site: Read) -> Records | None:
    """The records of the file `site` read, or None (a format not reduced, a file not there)."""
    path = root / str(site.file or "")
    call = site.call
    if not path.is_file() or call not in CALL_NAMES or call == "numpy.load" and path.suffix != ".npy":
        return None
    if call == "numpy.load":
        rows = np.load(path, mmap_mode="r")
        return Records(site, "npy", ".npy", rows) if rows.ndim >= 1 else None
    data = path.read_bytes()
    if call in TEXT_CALLS:
        lines = data.splitlines(keepends=True)
        return Records(site, "text", path.suffix, lines[1:], header=lines[0] if lines else b"")
    frames, at = [], 0  # each: length (8 bytes), its CRC (4), the payload, its CRC (4)
    while at + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[at : at + 8])
        frames.append(data[at + 12 : at + 12 + n])
        at += 12 + n + 4
    return Records(site, "tfrecord", path.suffix, frames)


def reduce_records(n: int, chunk: int, test: Callable[[list[int]], bool]) -> tuple[list[int], int]:
    """ddmin over chunks of `chunk` records, then over the records left ->
    (the records kept, the tests run). `test(indices)` shows the symptom?"""
    chunks = {f"{c:08d}": list(range(c * chunk, min(n, (c + 1) * chunk))) for c in range(-(-n // chunk))}

    def rows(cfg) -> list[int]:
        return sorted(i for c in cfg for i in chunks[c])

    by_chunk = Oracle(lambda cfgs: [test(rows(c)) for c in cfgs], True)
    kept = rows(ddmin(list(chunks), by_chunk))
    by_record = Oracle(lambda cfgs: [test(sorted(int(i) for i in c)) for c in cfgs], True)
    left = sorted(int(i) for i in ddmin([f"{i:08d}" for i in kept], by_record))
    return left, by_chunk.calls + by_record.calls


def npz_bytes(groups: list[tuple[int, Records]], keep: list[int]) -> bytes:
    arrays = {f"f{i}_{k}": v for i, r in groups for k, v in r.subset(keep).items()}
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


# What `rewrite_reads` inserts: statements only (see standin.HEADER).
HEADER = '''
import atexit as _tfrepro_atexit
import os as _tfrepro_os
import struct as _tfrepro_struct
import tempfile as _tfrepro_tempfile

import numpy as _tfrepro_np

_TFREPRO_FILES = kinds_literal


def _tfrepro_crc(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _tfrepro_gone(path):
    try:
        _tfrepro_os.remove(path)
    except OSError:
        pass


def _tfrepro_file(i):
    """A temp file of the original format holding the records kept in data.npz
    (removed when the script exits)."""
    kind, suffix = _TFREPRO_FILES[i]
    # beside the script; a notebook's kernel has no __file__ and runs in the notebook's dir
    here = _tfrepro_os.path.dirname(_tfrepro_os.path.abspath(globals().get("__file__", "repro.ipynb")))
    saved = _tfrepro_np.load(_tfrepro_os.path.join(here, "data.npz"))
    fd, path = _tfrepro_tempfile.mkstemp(suffix=suffix)
    _tfrepro_os.close(fd)
    _tfrepro_atexit.register(_tfrepro_gone, path)
    if kind == "npy":
        _tfrepro_np.save(path, saved[f"f{i}_rows"])
        return path
    blob, offsets = saved[f"f{i}_data"].tobytes(), saved[f"f{i}_offsets"]
    parts = [blob[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    with open(path, "wb") as f:
        for part in parts:
            if kind == "tfrecord":
                head = _tfrepro_struct.pack("<Q", len(part))
                f.write(head + _tfrepro_struct.pack("<I", _tfrepro_crc(head)))
                f.write(part + _tfrepro_struct.pack("<I", _tfrepro_crc(part)))
            else:
                f.write(part)
    return path
'''


def rewrite_reads(text: str, groups: list[tuple[int, Records]]) -> str | None:
    """`text` reading the kept records instead of the user's files (the i-th
    group's read call takes `_tfrepro_file(i)` for its path), or None."""

    def path(n: int, site: Read, call: cst.Call) -> cst.Call | None:
        if not call.args:
            return None
        first = call.args[0].with_changes(value=cst.parse_expression(f"_tfrepro_file({n})"))
        return call.with_changes(args=[first, *call.args[1:]])

    kinds = {i: (r.kind, r.suffix) for i, r in groups}
    header = HEADER.replace("kinds_literal", repr(kinds))
    new, done = swap_reads(text, [r.site for _, r in groups], CALL_NAMES, path, lambda _done: header)
    return new if len(done) == len(groups) else None


@dataclass(frozen=True)
class Reduction:
    """What `reduce_export` made: `out`, the export whose entries (the
    reference's when its reads match) read from data.npz the `records` kept
    of the `of` records of the reads `files` (their `indices`), found in
    `tests` re-runs; or `error`, why not."""

    error: str | None = None
    tests: int | None = None
    out: Export | None = None
    records: int = 0
    of: int = 0
    indices: tuple[int, ...] = ()
    files: tuple[Read, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """report.json's `data.reduction`."""
        if self.error is not None:
            return {"error": self.error} | ({} if self.tests is None else {"tests": self.tests})
        files = [{"file": r.file, "call": r.call, "at": r.at} for r in self.files]
        return dict(records=self.records, of=self.of, indices=list(self.indices), files=files, tests=self.tests)


def reduce_export(root: Path, export: Export, sites: list[Read], batches: int | None, shows: Check) -> Reduction:
    """Reduce the records of the largest group of same-sized data files the
    export's entry script reads (the reference's too, when its reads are
    the same). `shows(export)` re-runs the export, the records kept its
    `data` (data.npz), and says whether the symptom shows."""
    recs = [r for r in (read_records(root, s) for s in sites) if r is not None and len(r.items) > 1]
    if not recs:
        return Reduction("no data file the report can split into records (.npy, text, TFRecord)")
    n = max(len(r.items) for r in recs)
    groups = [(i, r) for i, r in enumerate(r for r in recs if len(r.items) == n)]
    new = export.with_entry(lambda text: rewrite_reads(text, groups) or text)
    if new.cand_files[ENTRY] == export.cand_files[ENTRY]:
        return Reduction("the read calls of the exported repro do not match the recorded reads")
    chunk = max(1, n // batches) if batches else max(1, n // 64)

    def with_npz(keep: list[int]) -> Export:
        return replace(new, data=npz_bytes(groups, keep))

    try:
        kept, tests = reduce_records(n, chunk, lambda keep: shows(with_npz(keep)) is True)
    except ValueError:
        return Reduction("the repro reading all the records through data.npz did not show the symptom")
    if len(kept) > min(MAX_RECORDS, MAX_SHARE * n):
        return Reduction(f"{len(kept)} of {n} records are needed: too many to ship", tests)
    return Reduction(None, tests, with_npz(kept), len(kept), n, tuple(kept), tuple(r.site for _, r in groups))


def choose_data(
    root: Path,
    result: ResultJson,
    entry: str,
    export: Export,
    *,
    check: Check,
    shows: Check | None = None,
    say: Callable[[str], None] = lambda _line: None,
    no_data: bool = False,
) -> tuple[Export, DataFacts]:
    """The data the export reads, from what the failing trial of `result`
    read in `entry`: (the export, report.json's `data` facts).

    Seeded stand-ins come first (in the reference's entry too), kept unless
    `check(export)` says False (None: not checked); then, with `shows` (one
    re-run per call), the few real records that still show the symptom
    (`reduce_export`, the export's `data`: data.npz); else the export as
    given: the repro reads the user's data and the facts name it."""
    facts, sites, batches = recorded(result, entry)
    if no_data:
        return export, replace(facts, note="--no-data: no stand-ins; the repro needs the user's data")
    try:
        replaced = rewrite(export.cand_files[ENTRY], sites)[1]
        standins = export.with_entry(lambda text: rewrite(text, sites)[0])
    except (cst.ParserSyntaxError, ValueError, KeyError) as e:
        return export, replace(facts, note=f"no stand-ins: {e}")
    if replaced:
        say(f"trying seeded synthetic stand-ins of {named(replaced)}")
        ok = check(standins)
        rest = tuple(s for s in facts.sources if s not in replaced)
        facts = replace(facts, standins=tuple(replaced), needs_user_data=rest, rerun=True, standin_reproduced=ok)
        if ok is not False:
            return standins, facts
        say("the stand-ins do not show the symptom: the repro keeps reading the user's data")
        note = "synthetic stand-ins did not reproduce the symptom; the repro reads the user's data"
        facts = replace(facts, needs_user_data=facts.standins + rest, note=note, standins=())
    if shows is None or not facts.needs_user_data or not sites:
        return export, facts
    say("reducing the data: ddmin over the records the failing run read (batches, then records), each re-run")
    got = reduce_export(root, export, sites, batches, shows)
    kept = {f.file for f in got.files}  # none when the reduction failed (no `out`)
    return got.out or export, replace(
        facts, reduction=got, needs_user_data=tuple(s for s in facts.needs_user_data if s.file not in kept)
    )
