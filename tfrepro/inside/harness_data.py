"""What the data is, inside the trial process (loaded by path by harness.py;
stdlib, NumPy and TensorFlow only, no tfrepro import). Ends up in
`TrialResult.data`:

- `sources`: where the data came from: each call that read a data file
  (`numpy.load`, `numpy.loadtxt`, `numpy.genfromtxt`, `pandas.read_csv`,
  `pandas.read_parquet`, `tf.data.TFRecordDataset`,
  `tf.data.experimental.make_csv_dataset`,
  `keras.utils.image_dataset_from_directory`, and `open()` of a file with a
  data extension), with the file, the script's file:line that made the call,
  and the shape read where it is known;
- `fits`: per `Model.fit`, its file:line, what it was fed (`kind`: arrays,
  dataframe, tf.data, generator, sequence), the element spec (structure,
  shapes, dtypes), the batches per epoch where they are known, and
  per-feature statistics (min, max, mean, std, fraction of zeros, NaN/Inf
  counts, the distinct values of integer, bool and string features up to
  `DISTINCT_MAX`): from the arrays themselves (their first `ROWS_MAX` rows),
  or, for a dataset or a generator, from the first `BATCHES_MAX` batches
  training saw (when the config asks, `record_data`: the batches leave the
  train step as extra outputs, harness_keras.py).

A fit with no source seen is the case the report names by its file:line: the
data comes from something the recorder cannot see.

Also the user's file:line (`is_library`, `user_where`): the one rule that walks
a stack or a traceback to the frame in the script's own code (a fit's call
site, a data read's, a write outside the trial dir, a dataset the script
iterates). Library code is told by its location, not by a name in its path:
installed packages, the standard library, the harness's own files (a project
in a folder called keras-bug/ or pandas-demo/ is the user's code). Loaded by
harness.py when it activates, imported as a module by the tests.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import os
import sys
import sysconfig
import traceback

DISTINCT_MAX = 20
ROWS_MAX = 100_000
BATCHES_MAX = 32
DATA_EXTENSIONS = (".csv", ".tsv", ".npy", ".npz", ".tfrecord", ".tfrecords", ".parquet", ".jsonl", ".txt", ".h5")
H = None  # the harness core module, set by harness.py (`_side`)


# -- the user's file:line ----------------------------------------------------------

_INSTALLED = ("site-packages", "dist-packages", "_tfrepro")
_OWN = os.path.dirname(os.path.abspath(__file__))
_STDLIB = tuple(
    {os.path.abspath(d) for d in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")) if d}
)


def is_library(name: str) -> bool:
    """Is the frame's file (its code's `co_filename`) library code, not the user's?"""
    if not name or name.startswith("<") or any(part in name for part in _INSTALLED):
        return True
    path = os.path.abspath(name)
    return any(path == d or path.startswith(d + os.sep) for d in (_OWN, *_STDLIB))


def user_where(frames=None, root: str | None = None) -> str | None:
    """file:line of the innermost of `frames` ((frame, line) pairs, innermost
    first, as `traceback.walk_stack`/`walk_tb` give them; by default the
    caller's stack) in the user's code: the first under `root` (default: the
    working directory), as a path relative to it; else the first anywhere,
    as an absolute path; None when every frame is a library's."""
    if frames is None:
        frames = traceback.walk_stack(sys._getframe(1))
    root = os.path.abspath(root or os.getcwd())
    fallback = None
    for frame, line in frames:
        name = frame.f_code.co_filename
        if is_library(name):
            continue
        path = os.path.abspath(name)
        if path.startswith(root + os.sep):
            return f"{os.path.relpath(path, root)}:{line}"
        fallback = fallback or f"{path}:{line}"
    return fallback


class FeatureStats:
    """Running statistics of one feature (all the values it took)."""

    def __init__(self) -> None:
        self.n = self.finite = self.zeros = self.nan = self.inf = 0
        self.total = self.total_sq = 0.0
        self.lo = self.hi = None
        self.dtype = None
        self.distinct: set | None = set()

    def update(self, values) -> None:
        import numpy as np

        a = np.asarray(values).reshape(-1)
        self.dtype = self.dtype or str(a.dtype)
        self.n += a.size
        if a.dtype.kind in "iub" or a.dtype.kind in "OSU":
            self._distinct(a)
        if a.dtype.kind not in "iubf":
            return
        f = a.astype(np.float64)
        ok = np.isfinite(f)
        self.nan += int(np.isnan(f).sum())
        self.inf += int(np.isinf(f).sum())
        good = f[ok]
        if a.dtype.kind == "f":
            self._distinct(good)  # labels stored as floats: 0.0/1.0
        self.finite += good.size
        self.zeros += int((good == 0).sum())
        if good.size:
            self.total += float(good.sum())
            self.total_sq += float((good * good).sum())
            lo, hi = float(good.min()), float(good.max())
            self.lo = lo if self.lo is None else min(self.lo, lo)
            self.hi = hi if self.hi is None else max(self.hi, hi)

    def _distinct(self, a) -> None:
        if self.distinct is None or len(set(a[:1000].tolist())) > DISTINCT_MAX:  # most features: decided on a sample
            self.distinct = None
            return
        self.distinct.update(
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in set(a[:ROWS_MAX].tolist())
        )
        if len(self.distinct) > DISTINCT_MAX:
            self.distinct = None

    def to_dict(self) -> dict:
        d = {"dtype": self.dtype, "count": self.n, "nan": self.nan, "inf": self.inf}
        if self.finite:
            mean = self.total / self.finite
            var = max(0.0, self.total_sq / self.finite - mean * mean)
            got = dict(min=self.lo, max=self.hi, mean=mean, std=math.sqrt(var), zero_frac=self.zeros / self.finite)
            d.update({k: v if math.isfinite(v) else None for k, v in got.items()})
        if self.dtype and self.dtype[0] in "iub" or (self.dtype or "").startswith(("<U", "|S", "object")):
            d["distinct"] = sorted(self.distinct, key=str) if self.distinct is not None else None
        elif self.distinct:  # a float feature with few values (labels, flags)
            d["distinct"] = sorted(self.distinct)
        return d


def stats_of(values) -> dict:
    """The statistics of one feature's values."""
    s = FeatureStats()
    s.update(values)
    return s.to_dict()


def _rel(path) -> str:
    try:
        p = os.fspath(path)
    except TypeError:
        return repr(path)[:200]
    if isinstance(p, bytes):
        p = p.decode("utf-8", "replace")
    ab = os.path.abspath(p)
    cwd = os.getcwd()
    return os.path.relpath(ab, cwd) if ab.startswith(cwd + os.sep) else p


def _shape(x):
    shape = getattr(x, "shape", None)
    try:
        return [None if d is None else int(d) for d in shape] if shape is not None else None
    except TypeError:
        return None


def spec_of(x):
    """Structure, shapes and dtypes of arrays, tensors or a dataset's element spec."""
    if isinstance(x, dict):
        return {str(k): spec_of(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [spec_of(v) for v in x]
    if x is None:
        return None
    dtype = getattr(x, "dtype", None)
    name = getattr(dtype, "name", None) or (str(dtype) if dtype is not None else type(x).__name__)
    return {"shape": _shape(x), "dtype": name}


def leaves(x, keys: tuple = ()):
    """(keys, leaf) of each leaf of a nested dict/list/tuple, None left out:
    the one walk over data inside a trial (this recorder's features, the
    check's batches in probes.py, the nan state's batch). `keys` is the
    path, the dict keys and list indices from the top; dicts in key order,
    as tf.nest flattens them. Written for people by `name`, for the
    train step's outputs and batch.npz by `batch_outputs`."""
    if isinstance(x, dict):
        for k in sorted(x, key=str):
            yield from leaves(x[k], (*keys, k))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from leaves(v, (*keys, i))
    elif x is not None:
        yield keys, x


def name(root: str, keys) -> str:
    """A leaf's name in messages and records: `x['image'][0]`."""
    return root + "".join(f"[{k!r}]" for k in keys)


def rows(x) -> int | None:
    """The rows of the first leaf of `x`; None with no leaf or a scalar one."""
    first = next(leaves(x), (None, None))[1]
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else None


def batch_outputs(data) -> dict:
    """The batch a train step got as extra outputs of the step (graph
    tensors): one per leaf, keyed by its keys joined with "/" ("0" = x,
    "1" = y, "2" = sample weights, "0/name" for a dict input), the names
    of batch.npz (harness_keras.StateSaver) and of `Recorder.see_batch`."""
    return {"/".join(map(str, keys)): leaf for keys, leaf in leaves(data)}


VALUES_MAX = 4_000_000  # values read per array for its statistics (an image array: fewer rows)


def _head(a):
    """The first rows of `a`, at most ROWS_MAX and VALUES_MAX values."""
    shape = getattr(a, "shape", None) or ()
    per_row = math.prod(int(d or 1) for d in shape[1:])
    return a[: max(1, min(ROWS_MAX, VALUES_MAX // max(per_row, 1)))] if shape else a


def _columns(name: str, a):
    """The features of one array: its columns when it is 2-D, else the whole array."""
    import numpy as np

    a = np.asarray(a)
    if a.ndim == 2 and a.shape[1] <= 256:
        return [(f"{name}[:, {j}]", a[:, j]) for j in range(a.shape[1])]
    return [(name, a)]


class Recorder:
    def __init__(self, note_error) -> None:
        self.note_error = note_error
        self.sources: list[dict] = []
        self.fits: list[dict] = []
        self.seen_files: set[str] = set()
        self.batch_stats: dict[str, FeatureStats] = {}
        self.batches_seen = 0
        self.depth = 0  # inside a recorded read

    # -- where the data came from ------------------------------------------
    def source(self, call: str, path, out=None) -> None:
        try:
            entry = {"call": call, "file": _rel(path) if path is not None else None, "at": user_where()}
            if out is not None and _shape(out) is not None:
                entry["shape"] = _shape(out)
                entry["value"] = value_of(out)
            if entry["file"] in self.seen_files and call == "open":
                return
            self.seen_files.add(entry["file"])
            if len(self.sources) < 100:
                self.sources.append(entry)
        except Exception:
            self.note_error("data source")

    def wrap(self, owner, attr: str, call: str, path_kw: str) -> None:
        """`owner.attr` recording its reads (the path: the first argument, or `path_kw`)."""
        rec = self

        def make(orig):
            def wrapper(*args, **kwargs):
                if rec.depth:  # a read inside another (np.load's own reads): the outer one is recorded
                    return orig(*args, **kwargs)
                rec.depth += 1
                try:
                    out = orig(*args, **kwargs)
                finally:
                    rec.depth -= 1
                rec.source(call, args[0] if args else kwargs.get(path_kw), out)
                return out

            wrapper.__doc__, wrapper.__name__ = orig.__doc__, getattr(orig, "__name__", attr)
            return wrapper

        H.wrap_once(owner, attr, make, "_tfrepro_data")

    # -- what training was fed ---------------------------------------------
    def on_fit(self, model, args, kwargs) -> None:
        x = args[0] if args else kwargs.get("x")
        y = args[1] if len(args) > 1 else kwargs.get("y")
        batch_size = args[2] if len(args) > 2 else kwargs.get("batch_size")
        kind = _kind(x)
        # Spec, batches per epoch and (for arrays) per-feature statistics.
        fit: dict = {"at": user_where(), "kind": kind, "sources_seen": len(self.sources)}
        if kind in ("tf.data", "sequence"):
            if kind == "tf.data":
                fit["element_spec"] = spec_of(getattr(x, "element_spec", None))
            fit["batches_per_epoch"] = None
            with contextlib.suppress(Exception):
                n = int(x.cardinality()) if kind == "tf.data" else len(x)
                fit["batches_per_epoch"] = n if n >= 0 else None  # a dataset's -1: infinite, -2: unknown
        elif kind in ("arrays", "dataframe"):
            if kind == "dataframe":
                x = {str(c): x[c].to_numpy() for c in x.columns}
            if hasattr(y, "to_numpy"):
                y = y.to_numpy()
            fit["element_spec"] = {"x": spec_of(x), "y": spec_of(y)}
            if n := rows(x):
                fit["records"] = n
                fit["batches_per_epoch"] = -(-n // int(batch_size or 32))
            named = [(name(root, keys), a) for root, part in (("x", x), ("y", y)) for keys, a in leaves(part)]
            fit["features"] = {col: stats_of(v) for label, a in named for col, v in _columns(label, _head(a))}
        if steps_per_epoch := kwargs.get("steps_per_epoch"):
            fit["batches_per_epoch"] = int(steps_per_epoch)
        if len(self.fits) < 10:
            self.fits.append(fit)

    def see_batch(self, batch: dict) -> None:
        """A batch training saw (path -> tensor; "0" = x, "1" = y), for datasets and generators."""
        if self.batches_seen >= BATCHES_MAX or not self.fits or self.fits[-1].get("features"):
            return
        self.batches_seen += 1
        for path, t in batch.items():  # `batch_outputs`'s keys
            top, *keys = path.split("/")
            keys = [int(k) if k.isdigit() else k for k in keys]  # a list index, named as `on_fit` names it
            label = name({"0": "x", "1": "y", "2": "sample_weight"}.get(top, top), keys)
            for col, values in _columns(label, t.numpy() if hasattr(t, "numpy") else t):
                self.batch_stats.setdefault(col, FeatureStats()).update(values)

    def to_dict(self) -> dict:
        if self.batch_stats and self.fits and not self.fits[-1].get("features"):
            self.fits[-1]["features"] = {k: s.to_dict() for k, s in self.batch_stats.items()}
            self.fits[-1]["stats_from"] = f"the first {self.batches_seen} batches training saw"
        return {"sources": self.sources, "fits": self.fits}


def value_of(out) -> dict | None:
    """What a read returned, for a synthetic stand-in: an array's dtype,
    shape and per-column statistics, or a DataFrame's columns."""
    import numpy as np

    if hasattr(out, "columns") and hasattr(out, "dtypes"):
        cols = {str(c): stats_of(_head(out[c].to_numpy())) for c in list(out.columns)[:256]}
        return {"type": "dataframe", "rows": int(len(out)), "columns": cols}
    if isinstance(out, np.ndarray) and out.dtype.kind in "iubfOSU":
        cols = {name: stats_of(values) for name, values in _columns("x", _head(out))}
        return {"type": "array", "shape": list(out.shape), "dtype": str(out.dtype), "columns": cols}
    return None


def _kind(x) -> str:
    mod = type(x).__module__ or ""
    names = {c.__name__ for c in type(x).__mro__}
    if "DatasetV2" in names or "Dataset" in names and "tensorflow" in mod:
        return "tf.data"
    if {"Sequence", "PyDataset"} & names:
        return "sequence"
    if "DataFrame" in names:
        return "dataframe"
    if hasattr(x, "__next__") or type(x).__name__ == "generator":
        return "generator"
    return "arrays"


def install(rec: Recorder, finder) -> None:
    """The source hooks, each as its library is imported (open()'s now)."""

    def on_numpy(np):
        for attr in ("load", "loadtxt", "genfromtxt"):
            rec.wrap(np, attr, f"numpy.{attr}", "fname" if attr != "load" else "file")

    def on_pandas(pd):
        for attr in ("read_csv", "read_parquet", "read_json", "read_table", "read_feather"):
            rec.wrap(pd, attr, f"pandas.{attr}", "filepath_or_buffer" if "csv" in attr else "path")

    def on_tf(tf):
        rec.wrap(tf.data.experimental, "make_csv_dataset", "tf.data.experimental.make_csv_dataset", "file_pattern")

        def make(orig):
            def __init__(self, filenames, *args, **kwargs):
                orig(self, filenames, *args, **kwargs)
                files = filenames if isinstance(filenames, (list, tuple)) else [filenames]
                for f in files[:20]:
                    rec.source("tf.data.TFRecordDataset", f if isinstance(f, (str, bytes)) else repr(f))

            return __init__

        H.wrap_once(tf.data.TFRecordDataset, "__init__", make, "_tfrepro_data")

    def on_keras(keras):
        for attr in ("image_dataset_from_directory", "text_dataset_from_directory"):
            rec.wrap(keras.utils, attr, f"keras.utils.{attr}", "directory")

    for name, fn in (("numpy", on_numpy), ("pandas", on_pandas), ("tensorflow", on_tf), ("keras", on_keras)):
        finder.add(name, lambda module, fn=fn, name=name: H._quietly(f"data hooks ({name})", fn, module))

    def make(orig):  # open() of a data file for reading (csv, npy, tfrecord, ...), from the user's code
        def open_(file, mode="r", *args, **kwargs):
            f = orig(file, mode, *args, **kwargs)
            with contextlib.suppress(Exception):
                if isinstance(file, (str, os.PathLike)) and "r" in mode and "+" not in mode:
                    name = os.fspath(file)
                    # the direct caller is the user's code (not NumPy's np.load opening its file)
                    if name.lower().endswith(DATA_EXTENSIONS) and not is_library(sys._getframe(1).f_code.co_filename):
                        rec.source("open", name)
            return f

        return open_

    H.wrap_once(builtins, "open", make, "_tfrepro_data")
