"""Reading a stored TrialResult (a cache entry, a trial's result.json) so
that anything else is a miss: `[]`, a truncated file, a hand-edited field of
the wrong type, an entry copied under another key. Never an exception.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfrepro.trials.values import LISTS, NUM, TrialResult

_NONE = type(None)
# The type of every scalar field of a stored TrialResult (absent fields take their default).
_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("crashed", "timed_out", "could_not_run", "cached"), (bool,)),
    "weights_finite": (bool, _NONE),
    **dict.fromkeys(("first_nonfinite_step", "exit_code", "peak_rss_bytes", "device_peak_bytes"), (int, _NONE)),
    "steps_run": (int,),
    "wall_s": NUM,
    "growth_per_step": (*NUM, _NONE),
    **dict.fromkeys(("label", "key", "mode"), (str,)),
    **dict.fromkeys(("error", "log_dir", "tf_version", "keras_version"), (str, _NONE)),
    "extra": (dict, _NONE),
}


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file at `path`, or None (missing, unreadable, not an object)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_result(path: Path, key: str | None = None) -> TrialResult | None:
    """The TrialResult stored at `path`, or None: missing, unreadable, not a
    well-formed result (every known field of its type: not a truncated or
    hand-edited file), or (given `key`) stored for another key."""
    data = read_json(path)
    if data is None or (key is not None and data.get("key", key) != key):
        return None
    for name, types in _RESULT_TYPES.items():
        if name in data and (not isinstance(data[name], types) or (bool not in types and type(data[name]) is bool)):
            return None
    for name, (types, _) in LISTS.items():  # their items' types: values.LISTS
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(x, types) and type(x) is not bool for x in value):
            return None
    try:
        return TrialResult.from_dict(data)
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
