"""How ISSUE.md writes a number (issue_text.py, issue_extra.py, loop_table.py)."""

from __future__ import annotations

import math
from typing import Any


def fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else f"{x:.{digits}g}"
    return str(x)
