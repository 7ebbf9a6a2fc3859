"""One configuration → a variant under `.tfrepro/` → a fresh process → TrialResult.

The edge between tfrepro and the training script (asv's runner pattern): the
child writes its result JSON to a path the parent names, stdout and stderr
are log files, the child runs in its own session so a timeout (or a Ctrl-C in
the parent) kills its whole process tree. The runner measures; it never
decides what a result means (`classify.py` does).

The process is forked from a warm server that imported TensorFlow already
(2-3 s cheaper), or cold behind `inside/launch.py`: `procs.spawn` says when.

Its files under the state dir (a trial dir, a cache entry): `state.py`'s Layout.

Invariants:
- the user's files are only read (the variant is rendered into the trial dir);
- a result produced by the child, a crash or a timeout is cached; a trial
  interrupted in the parent (Ctrl-C, `stop_trials`) is not, and leaves no
  process behind;
- no trial outlives this process, whatever it runs (`procs.py`);
- a warm and a cold run of the same trial give the same result (same cache
  key; tests/test_warm.py, benchmarks/warm_vs_cold.py);
- safe from several threads: unique trial dirs, cache writes are atomic.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfrepro import inside
from tfrepro.dists import versions as this_versions
from tfrepro.errors import TfreproError
from tfrepro.inside import harness
from tfrepro.settings import WARMUP_STEPS, TrialSettings
from tfrepro.trials import confine, warm
from tfrepro.trials.procs import Exit, spawn, warm_argv
from tfrepro.trials.state import StateDir
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult, load_result, read_json

if TYPE_CHECKING:
    from tfrepro.project import Project

# Variables of the parent's environment that change what a trial computes,
# hence part of the cache key (explicit `env` overrides always are).
_KEYED_ENV_PREFIXES = ("TF_", "KERAS_", "XLA_", "CUDA_", "TFREPRO_")
# A script that takes arguments and did not get them: argparse's usage
# error (exit 2, "usage:" on stderr) is named as such, with the way to pass them.
USAGE_HINT = (
    "the script exited with its argparse usage error: pass the script's arguments after `--`, "
    "e.g. `tfrepro bisect train.py -- --epochs 3` (run, check and features take them the same way)"
)


# -- cache key ------------------------------------------------------------------


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def keyed_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment that enters the key: inherited TF_/KERAS_/... variables
    plus the explicit overrides."""
    out = {k: v for k, v in os.environ.items() if k.startswith(_KEYED_ENV_PREFIXES)}
    out.update(env or {})
    return dict(sorted(out.items()))


def trial_key(variant_hash: str, settings: TrialSettings, how: TrialOptions = TrialOptions()) -> str:
    """sha256 over everything that can change a trial's result: of `how`, its
    env, plugins (and their files' digests), plugin options and versions
    (keys tensorflow, keras, tf_keras, python: those of the interpreter the
    trial runs under when it is not this one, `envs.read_versions`, else this
    one's, `dists.versions`)."""
    v = how.versions if how.versions is not None else this_versions()
    payload = {
        "variant": variant_hash,
        "settings": settings.to_dict(),
        **{name: v.get(name) for name in ("tensorflow", "keras", "tf_keras", "python")},
        "harness": inside.digest(),
        "env": keyed_env(how.env),
        "plugins": [[str(p), _file_digest(Path(p))] for p in how.plugins],
        "plugin_options": how.plugin_options or {},
        "confine": confine.detect().mode,  # a write outside: in the overlay, failing, or real
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# -- the trial ------------------------------------------------------------------


def run_trial(
    project: "Project",
    enabled: Iterable[str],
    settings: TrialSettings,
    how: TrialOptions = TrialOptions(),
    spawn: Callable[[tuple[str, ...], Path, TrialOptions], TrialResult] | None = None,
) -> TrialResult:
    """Run `project` with the features `enabled` ON (all others OFF), or return
    the cached result of the same trial; `how` says how it runs (`TrialOptions`);
    `spawn(enabled, trial_dir, how)` runs it elsewhere (a Ray task) in place of
    `run_variant`, with the `how` it would get, the same key and cache."""
    how = replace(how, plugins=tuple(Path(p).resolve() for p in how.plugins))
    enabled_t = tuple(sorted(set(enabled)))
    state = StateDir(how.state_dir) if how.state_dir is not None else StateDir.of(project.root)
    key = trial_key(project.variant_hash(enabled_t), settings, how)

    def execute(trial_dir: Path) -> TrialResult:
        run_how = replace(how, env={**(how.env or {}), **(how.unkeyed_env or {})})
        if spawn is not None:  # the variant is rendered where it runs
            return _annotated(spawn(enabled_t, trial_dir, run_how), project, None, how.versions)
        files = asdict(project.write_variant(enabled_t, trial_dir / "variant"))
        result = run_variant(trial_dir / "variant", settings, trial_dir, run_how)
        return _annotated(result, project, files, how.versions)

    return confine.check_outside(cached(state, key, enabled_t, how.label, how.use_cache, execute))


def _annotated(
    result: TrialResult, project: "Project", files: Any, versions: Mapping[str, str | None] | None
) -> TrialResult:
    """The result with what the parent knows: the trial's own copies, the
    trial interpreter's versions, a hint for a crash on a missing file."""
    # Which files the trial got as its own copies (and how): never a link.
    extra = {**result.extra, "files": files} if files else dict(result.extra)
    if versions is not None:  # the trial's interpreter, not the driver's
        extra["versions"] = dict(versions)
        result = replace(result, tf_version=result.tf_version or versions.get("tensorflow"))
    hint = result.crashed and (
        missing_path_hint(result.error, project.root) or lfs_pointer_hint(project.root, project.files)
    )
    if hint:  # a read through a directory symlink or out of the project: not in the copy
        extra["hint"] = hint
        result = replace(result, error=f"{result.error} (hint: {hint})")
    return replace(result, extra=extra)


# -- why a file a trial reads is missing from its copy: the hint a crash gets --------
# A trial runs in a copy of the project under `.tfrepro/trials/.../variant/`.
# Two kinds of reads that work in the project fail there, silently from the
# user's side: a path through a symlinked directory (`data -> /mnt/data`: a
# variant never links to a user's files, so the link is not copied), and a
# relative path out of the project (`../shared_data/x.csv`: relative to the
# copy, that is somewhere under `.tfrepro/`). The hint says which, and the fix.
# A third: a git-lfs pointer file read as data (commit mode never downloads LFS
# objects, and a clone without `git lfs pull` holds only pointers).

# `FileNotFoundError: [Errno 2] No such file or directory: 'x'`, tf.io's
# `NotFoundError: x; No such file or directory`, `No such file: x`.
_MISSING = (
    re.compile(r"No such file or directory: ['\"]([^'\"]+)['\"]"),
    re.compile(r"NotFoundError[^:]*: ([^;\s]+); No such file"),
    re.compile(r"(?:not found|No such file)[:]? ['\"]?([^'\"\s;]+)"),
)


def missing_path_hint(error: str | None, root: Path) -> str | None:
    """The hint for a crash whose error names a missing path, or None."""
    path = next((m.group(1) for p in _MISSING if (m := p.search(error or ""))), None)
    if not path or os.path.isabs(path):
        return None
    parts = Path(path).parts
    if parts and parts[0] == "..":
        return (
            f"{path} is outside the project directory: a trial runs in a copy of the project under .tfrepro/, "
            f"where it is not; give the script an absolute path ({(Path(root) / path).resolve()}) or move the "
            "data into the project"
        )
    for n in range(1, len(parts)):
        prefix = Path(root, *parts[:n])
        if prefix.is_symlink() and prefix.is_dir():
            rel = Path(*parts[:n]).as_posix()
            return (
                f"{rel} is a symlink to the directory {os.readlink(prefix)}, which trials do not get (a trial's "
                f"copy never links to your files); read it by its absolute path ({prefix.resolve()}/...) or make "
                f"{rel} a real directory in the project"
            )
    return None


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def lfs_pointer_hint(root: Path, files: list[str]) -> str | None:
    """The hint for a crash in a project holding git-lfs pointer files."""
    pointers = []
    for rel in files:
        p = Path(root) / rel
        with contextlib.suppress(OSError):
            if p.stat().st_size <= 1024 and p.read_bytes().startswith(LFS_POINTER):
                pointers.append(rel)
    if not pointers:
        return None
    more = f" and {len(pointers) - 1} more" if len(pointers) > 1 else ""
    return (
        f"{pointers[0]}{more} is a git-lfs pointer file, not its data (tfrepro never downloads LFS objects): "
        "if the script reads it, run `git lfs pull` in the project, or give the data by an absolute path"
    )


def cached(
    state: StateDir,
    key: str,
    enabled: tuple[str, ...],
    label: str,
    use_cache: bool,
    execute: Callable[[Path], TrialResult],
) -> TrialResult:
    """The trial cache protocol, the same for every executor: a hit is returned
    as is; otherwise `execute(trial_dir)` runs it in a new trial dir and its
    result is stored (a could-not-run result is returned, never stored, and
    so is one whose trial dir was removed while it ran)."""
    if use_cache:
        # missing, unreadable, or written by an incompatible version: run it again
        hit = load_result(state.cache_file(key), key)
        if hit is not None:
            return replace(hit, enabled=enabled, label=label, cached=True)
    trial_dir = state.new_trial_dir(key)
    try:
        try:
            result = replace(execute(trial_dir), enabled=enabled, label=label, key=key)
        except OSError as e:
            raise disk_full(e, trial_dir) or e
        if not state.intact(trial_dir):  # removed under it (a `clean`, an `rm -r`): says nothing
            result = replace(
                result, could_not_run=True, error=f"its trial directory {trial_dir} was removed while it ran"
            )
        full = disk_full(result, trial_dir)
        if full is not None:  # a crash of a full disk says nothing about the features
            raise full
        state.store(key, result)
    finally:
        state.drop_variant(trial_dir)  # results are kept, not copies (a half copy goes at once too)
        state.release(trial_dir)
    return result


# -- a full disk -------------------------------------------------------------------
# A full disk is the machine's problem, never a trial's verdict: a copy or a
# trial that fails for want of space ends the command with one clear message
# (which file system, how much is free, what to do), its half-written trial
# directory removed at once, and nothing cached.

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "ENOSPC")
# A trial that crashed with less free space than this likely crashed of it.
_LOW_BYTES = 1 << 20


class DiskFullError(TfreproError):
    """No space left where `.tfrepro/` (a trial's copy, its logs) lives."""


def _free(path: Path) -> int | None:
    for p in (path, *path.parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(p).free
    return None


def disk_full(what: OSError | TrialResult, trial_dir: Path) -> DiskFullError | None:
    """The error to raise when `what` (an exception while making or running
    the trial, or its crashed result) is a full disk, else None. The trial
    dir is removed at once when it is."""
    if isinstance(what, OSError):
        full = what.errno in NO_SPACE
    else:
        crashed = what.crashed or bool(what.extra.get("no_result"))
        text = what.error or ""
        free = _free(Path(trial_dir))
        full = crashed and (any(t in text for t in _NO_SPACE_TEXT) or (free is not None and free < _LOW_BYTES))
    if not full:
        return None
    shutil.rmtree(trial_dir, ignore_errors=True)
    free = _free(Path(trial_dir))
    left = f" ({free / 2**20:.1f} MB free)" if free is not None else ""
    return DiskFullError(
        f"no space left on the disk holding {Path(trial_dir).parent.parent}{left}: the trial's copy could not be "
        "written or the trial ran out of space; nothing was cached and its half-written directory was removed. "
        "Free some space (`tfrepro clean` removes old runs and copies), or lower `[state] keep_trials`, then run again"
    )


def child_env(settings: TrialSettings, config_path: Path, env: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(os.environ)
    out.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out["PYTHONUNBUFFERED"] = "1"  # a killed trial still leaves its logs
    if settings.deterministic:
        out["PYTHONHASHSEED"] = str(settings.seed)
    out.update(env or {})
    # The injection dir goes first, also before a PYTHONPATH the caller overrides.
    out["PYTHONPATH"] = os.pathsep.join(
        [str(inside.INJECT_DIR)] + ([out["PYTHONPATH"]] if out.get("PYTHONPATH") else [])
    )
    out[harness.CONFIG_ENV] = str(config_path)
    return out


def write_config(settings: TrialSettings, trial_dir: Path, variant_dir: Path, how: TrialOptions) -> Path:
    """`trial_dir/trial.json`: what the harness reads in the trial process."""
    config = {
        "result_path": str(trial_dir / "result.json"),
        "steps": 0 if settings.until_symptom else settings.steps,
        # "until its symptom": no step cap, this many seconds of training at most
        "until_s": settings.budget_s if settings.until_symptom else 0,
        "save_state_step": settings.save_state_step,
        # the batches a dataset or generator feeds fit, for statistics (harness_data.py)
        "record_data": settings.until_symptom,
        "state_dir": str(trial_dir / "nan_state"),
        # a timing trial's budget (0: none), in steps past the warm-up
        "steps_max": settings.steps_max,
        "min_time_s": settings.min_time_s,
        "min_steps": settings.min_steps,
        "timed_calls": list(settings.timed_calls) if settings.timing else [],
        "warmup": WARMUP_STEPS,
        "seed": settings.seed,
        "deterministic": settings.deterministic,
        "memory_limit_mb": settings.memory_limit_mb,
        "replicas": settings.replicas,
        "jit_auto": settings.jit_auto,
        "plugins": [str(Path(p).resolve()) for p in how.plugins],
        "plugin_options": dict(how.plugin_options or {}),
        # the harness names a denied write (Landlock)
        "confine": confine.spec_for(confine.detect(), trial_dir, also=[variant_dir]),
    }
    path = trial_dir / "trial.json"
    path.write_text(json.dumps(config, indent=1, default=str), encoding="utf-8")
    return path


def run_variant(
    variant_dir: Path,
    settings: TrialSettings,
    trial_dir: Path,
    how: TrialOptions = TrialOptions(),
    *,
    warm_pool: "warm.WarmPool | None" = None,
) -> TrialResult:
    """Run an already rendered variant (no cache; `how.env` is its whole
    environment override), warm or cold (the module docstring; `--cold`:
    `warm.COLD`). `trial_dir` receives the config, the result and the
    logs. Raises what interrupted the parent (KeyboardInterrupt;
    `TrialStopped` from `stop_trials`) after killing the child's process tree."""
    trial_dir = Path(trial_dir).resolve()
    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_config(settings, trial_dir, variant_dir, how)
    # The child's argv; `python ...` runs under `how.python` (default: this interpreter).
    cmd = list(settings.command or (how.python or sys.executable, settings.entry))
    if cmd[0] in ("python", "python3"):
        cmd[0] = how.python or sys.executable
    # The driver's TensorFlow says nothing about another interpreter's trial.
    tf_fallback = None if how.python else this_versions()["tensorflow"]
    full_env = child_env(settings, config_path, how.env)
    # warm only a plain `python script.py` (`procs.warm_argv`): under the trial's interpreter, or one
    # the command names (its own warm server); another program runs cold at once
    python = cmd[0] if re.fullmatch(r"python[\d.]*", Path(cmd[0]).name) else how.python
    pool = None if how.cold or warm.COLD or warm_argv(cmd, python) is None else warm_pool or warm.default_pool()
    end = spawn(cmd, Path(variant_dir), full_env, settings.timeout_s, trial_dir, pool)
    result = _collect(end, settings, trial_dir, tf_fallback)
    return confine.note_outside(replace(result, extra={**result.extra, "process": end.process}), trial_dir)


def _collect(end: Exit, settings: TrialSettings, trial_dir: Path, tf_fallback: str | None) -> TrialResult:
    """The trial's result from its process's end and what the harness wrote in `trial_dir`."""
    result_path, stderr_path = trial_dir / "result.json", trial_dir / "stderr.log"
    rc = end.rc
    base = {"exit_code": rc, "wall_s": round(end.wall_s, 4), "log_dir": str(trial_dir)}
    if end.timed_out:
        progress = read_json(Path(harness.progress_path(str(result_path)))) or {}
        error = f"timed out after {settings.timeout_s:g} s"
        if progress.get("steps_run"):
            error += f" (last step seen: {progress['steps_run']})"
        return TrialResult.from_dict(
            {**progress, "timed_out": True, "error": error, "tf_version": tf_fallback, **base, "exit_code": None}
        )
    if end.error is not None:  # it could not start
        data = {"crashed": True, "error": end.error}
    elif (data := read_json(result_path)) is None:  # died without a word: segfault, os._exit, python -S
        data = {"extra": {"no_result": True}}
    result = TrialResult.from_dict({**data, **base})
    if rc != 0 and not result.crashed:
        result = replace(result, crashed=True, error=result.error or _crash_line(rc, stderr_path))
    return result if result.tf_version is not None else replace(result, tf_version=tf_fallback)


def usage_error(rc: int | None, stderr_path: Path) -> str | None:
    """argparse's error line ("train.py: error: ...") when the script exited
    with code 2 after a `usage:` line on stderr; None otherwise. (TensorFlow's
    own log lines may come after it: the last line is not the one to quote.)"""
    lines = read_tail(stderr_path).splitlines() if rc == 2 else []
    starts = [i for i, line in enumerate(lines) if line.startswith("usage:")]
    if not starts:
        return None
    after = lines[starts[-1] :]
    return next((line.strip() for line in after if ": error: " in line), after[0].strip())


def read_tail(path: Path) -> str:
    """The last 64 KiB of a log file as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _crash_line(rc: int | None, stderr_path: Path) -> str:
    usage = usage_error(rc, stderr_path)
    if usage:
        return f"{usage} ({USAGE_HINT})"
    line = last_line(stderr_path)
    if line:
        return line
    if rc is not None and rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


# TensorFlow's own C++ log lines (absl: "E0000 00:00:1796182820.100479 1948
# cuda_executor.cc:1228] ..."; older: "2026-12-02 03:00:00.123456: I
# tensorflow/..."): a trial that crashes on import prints them after its
# traceback's last line, and the crash message would quote cuInit.
_TF_LOG = re.compile(
    r"^(?:[IWEF]\d{4} \d\d:\d\d:\d\d[.\d]*\s+\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\))"
)


def last_line(path: Path) -> str | None:
    """The last non-blank line of a log file (its end only is read) that is
    not one of TensorFlow's own log lines (the last line at all when every
    one is)."""
    lines = [line.strip() for line in read_tail(path).splitlines() if line.strip()]
    return next((line for line in reversed(lines) if not _TF_LOG.match(line)), lines[-1] if lines else None)
