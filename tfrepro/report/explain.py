"""`tfrepro report` on a run whose answer is a known cost (tfrepro/costs.py,
`known_cost` in result.json): an explanation with the fix, not a drafted
bug report (`--force` drafts one anyway)."""

from __future__ import annotations

from pathlib import Path

from tfrepro.report import outdir
from tfrepro.report.records import ResultJson

EXPLANATION = "EXPLANATION.md"


def write_explanation(run_dir: Path, result: ResultJson, out: Path | None = None) -> Path:
    """Write EXPLANATION.md into `out` (default: RUN_DIR/report) and return its path."""
    cost = result["known_cost"]
    timing = result.get("timing") or {}
    ratio = f" (step time x{timing['ratio']:.2f})" if isinstance(timing.get("ratio"), (int, float)) else ""
    culprits = ", ".join(result.get("culprits") or cost.get("features") or [])
    text = "\n".join(
        [
            f"# {result.get('symptom') or 'slowdown'} caused by {culprits}: a known cost, not a bug",
            "",
            f"The bisection found that {culprits} makes training slower{ratio}.",
            f"That is the documented cost of this feature on the hardware the trials ran on: {cost['reason']}.",
            "",
            f"**Fix:** {cost['fix']}.",
            "",
            f"Source: {cost['source']}",
            "",
            "No bug report was drafted. If you believe the cost is larger than it should be, "
            "`tfrepro report --force` drafts one anyway.",
            "",
        ]
    )
    dest = outdir.prepare(Path(out) if out is not None else Path(run_dir) / "report")
    path = dest / EXPLANATION
    path.write_text(text, encoding="utf-8")
    return path
