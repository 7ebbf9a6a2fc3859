"""The environment a bug report states: versions, build, devices.

TensorFlow is imported only in a child process, so the CLI process stays
light and a broken TensorFlow install still gives a report that says so.
When the report re-ran the repro, the re-run's own process already
described itself (`inside/setup_plugin.py`) and no extra child is needed;
without a re-run, `in_trial` runs a trial of a script that only imports
TensorFlow with that plugin (the trial spawner: launcher, confinement, time
limit). `collect` runs `inside/envprobe.py` (`--runtime`: with the runtime
settings) as a child of its own for `tfrepro env`, which must still tell
what is there on a machine where no trial can run (no confinement, a broken
install).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfrepro.inside import ENV_PROBE

# The script of the environment trial: TensorFlow and Keras imported, nothing run.
ENV_SCRIPT = "import tensorflow\nimport keras\n"


def in_trial(*, python: str | None = None, timeout_s: float = 180.0) -> dict[str, Any]:
    """Facts about the TensorFlow installation `python` runs, from inside a
    trial (`inside/setup_plugin.py`'s `environment`). Never raises for a
    failing trial: the facts then carry `probe_error`."""
    from tfrepro.report.rerun import default_runner, write_files
    from tfrepro.settings import TrialSettings

    with tempfile.TemporaryDirectory(prefix="tfrepro-env-") as tmp:
        root = write_files(Path(tmp) / "env", {"repro.py": ENV_SCRIPT})
        run = default_runner(Path(tmp) / "state", python=python, label="environment", cold=True)
        got = run(root, TrialSettings(timeout_s=timeout_s, deterministic=False))
    facts = got.extra.get("environment")
    if isinstance(facts, dict):
        return facts
    if got.timed_out:
        return {"probe_error": f"environment probe timed out after {timeout_s:.0f} s"}
    return {"probe_error": f"environment probe failed (exit {got.exit_code}): {got.error or 'no output'}"}


def collect(*, python: str | None = None, timeout_s: float = 180.0, runtime: bool = False) -> dict[str, Any]:
    """Facts about the TensorFlow installation `python` runs (see
    `inside/envprobe.py`; `runtime` adds the runtime settings).
    Never raises for a failing child: the facts then carry `probe_error`."""
    from tfrepro.trials.confine import detect
    from tfrepro.trials.procs import confined, run_probe

    with tempfile.TemporaryDirectory(prefix="tfrepro-env-") as tmp:
        out = Path(tmp) / "env.json"
        cmd = [python or sys.executable, str(ENV_PROBE), str(out), *(["--runtime"] if runtime else [])]
        # Confined to `tmp` where a mechanism works; where none does it runs as is (it is
        # tfrepro's code: `tfrepro env` must still tell what is there, the missing confinement included).
        cmd = confined(cmd, Path(tmp)) if detect().mode != "none" else cmd
        # quiet logs, and no path that would make tfrepro importable (what it probes must stand on its own)
        env = {"TF_CPP_MIN_LOG_LEVEL": "2"} | {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = run_probe(cmd, Path(tmp), env, timeout_s)
        if done is None:
            return {"probe_error": f"environment probe timed out after {timeout_s:.0f} s"}
        if not out.exists():
            tail = done[1].strip().splitlines()[-1:] or ["no output"]
            return {"probe_error": f"environment probe failed (exit {done[0]}): {tail[0]}"}
        return json.loads(out.read_text(encoding="utf-8"))
