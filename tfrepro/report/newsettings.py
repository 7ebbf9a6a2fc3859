"""What `new --from` carries from the user's project besides the files: the
script's arguments and the settings of its tfrepro.toml.

- The arguments: those given after `--` (`tfrepro new --from train.py NEW
  -- --epochs 3`), else those of `[trial] command`, else those of the
  latest bisect run of the same script (its result.json records the trial
  command, `tfrepro bisect train.py -- --epochs 3`). The new repro.py takes
  them when it is given none (`scriptargs.default_args`), so `python
  repro.py` and the new project's trials run as the script's did.
- The settings: `[trial]` (but `entry` and `command`: the new project runs
  `repro.py`), `[symptoms]` and `[state]`, as the user wrote them; they
  become the template's `settings` answer, written into the new
  tfrepro.toml. `[features.NAME]` tables are the `affects_loss` answer.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from tfrepro.report.records import run_dirs
from tfrepro.report.scriptargs import script_args
from tfrepro.settings import TrialSettings
from tfrepro.trials.state import STATE_DIR_NAME

CARRIED_TABLES = ("trial", "symptoms", "state")
NOT_CARRIED = {"trial": {"entry", "command"}}


def user_settings(manifest: Any) -> dict[str, dict[str, object]]:
    """The user's tfrepro.toml tables the new project keeps ({} without one)."""
    if not manifest.path or not Path(manifest.path).is_file():
        return {}
    data = tomllib.loads(Path(manifest.path).read_text(encoding="utf-8"))
    kept = {
        t: {k: v for k, v in (data.get(t) or {}).items() if k not in NOT_CARRIED.get(t, set())} for t in CARRIED_TABLES
    }
    return {table: values for table, values in kept.items() if values}


def recorded_args(root: Path, entry: str) -> tuple[list[str], str | None]:
    """The script arguments of the latest bisect run of `entry` under `root`
    (and that run's directory), or ([], None)."""
    runs = root / STATE_DIR_NAME / "runs"
    if not runs.is_dir():
        return [], None
    for run in reversed(run_dirs(runs)):
        try:
            settings = json.loads((run / "result.json").read_text(encoding="utf-8")).get("settings")
        except (OSError, ValueError):
            continue
        if not isinstance(settings, dict):
            continue
        recorded = TrialSettings.from_dict(settings)
        if recorded.entry == entry or entry in (recorded.command or ()):
            return script_args(recorded, entry), str(run)
    return [], None
