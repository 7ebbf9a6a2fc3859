"""What `tfrepro bisect` shows on a terminal: live progress and the final table.

Everything goes to stderr except the final answer, so `tfrepro bisect > out`
keeps the answer alone. Imported only by the CLI (rich is not needed by the
engine).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from tfrepro.bisect.events import BisectEvents, TrialRecord
from tfrepro.bisect.result_doc import FeatureEvidence
from tfrepro.trials.values import RunResult, Status, TrialRow


def make_console(stderr: bool = True, **kwargs: Any) -> Console:
    """The progress console: stderr, colourless when NO_COLOR is set and not
    empty (https://no-color.org), on a terminal too."""
    return Console(stderr=stderr, no_color=bool(os.environ.get("NO_COLOR")) or None, **kwargs)


def _config(enabled: tuple[str, ...] | list[str]) -> str:
    return ", ".join(enabled) or "(baseline)"


class RichProgress(BisectEvents):
    """One line per finished trial under a spinner (`status`, shown inside
    `with progress.status:`) that says what is running."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lock = threading.Lock()
        self.running: dict[tuple[tuple[str, ...], int], str] = {}
        self.done = 0
        self.cached = 0
        self.status = console.status("starting", spinner="dots")
        self.phase_text = "starting"

    def _refresh(self) -> None:
        now = ", ".join(f"{_config(c)} [{role}]" for (c, _), role in list(self.running.items())[:3]) or "-"
        self.status.update(f"{self.phase_text}  |  {self.done} trials ({self.cached} cached)  |  running: {now}")

    def phase(self, text: str) -> None:
        with self.lock:
            self.phase_text = text
            self.console.print(f"[bold]{text}[/bold]")
            self._refresh()

    def trial_started(self, enabled: tuple[str, ...], role: str, repeat: int) -> None:
        with self.lock:
            self.running[(enabled, repeat)] = role
            self._refresh()

    def trial_finished(self, record: TrialRecord) -> None:
        r = record.result
        # The engine's verdict (against the trial's reference and baselines:
        # it shows a trial once it has judged it); the display never judges a
        # trial itself, which without the reference would say `ok` for a mismatch.
        verdict = record.live or record.verdict
        what = verdict.value if verdict is not None else "?"
        median = r.median_step_time()
        timing = f"{median * 1000:.3g} ms/step" if median is not None else ""
        with self.lock:
            self.running.pop((record.enabled, record.repeat), None)
            self.done += 1
            self.cached += r.cached
            tag = "cached" if r.cached else f"{r.wall_s:.1f} s"
            cfg = _config(record.enabled)
            cfg = cfg if len(cfg) <= 34 else cfg[:33] + "…"
            self.console.print(
                f"{record.index:3d} {what:<8} {cfg:<34} {record.role:<15} r{record.repeat:<5} {timing:>13} ({tag})",
                highlight=False,
                soft_wrap=True,
            )
            self._refresh()


def evidence_of(result: RunResult) -> FeatureEvidence:
    """A feature bisection's evidence (empty for an answer that has none)."""
    ev = result.evidence
    return ev if isinstance(ev, FeatureEvidence) else FeatureEvidence()


def final_table(console: Console, result: RunResult) -> None:
    """The end of a run: culprits, verdict per configuration, trials, wall time."""
    ev = evidence_of(result)
    rows: dict[tuple[str, ...], list[TrialRow]] = {}
    for row in ev.trials_table:
        rows.setdefault(tuple(row["enabled"]), []).append(row)
    table = Table("configuration", "runs", "verdicts", "cached", title="trials", show_lines=False)
    for cfg, rs in rows.items():
        verdicts = Counter(r["verdict"] for r in rs)  # in order of first appearance
        text = ", ".join(f"{v} x{n}" if n > 1 else str(v) for v, n in verdicts.items())
        table.add_row(_config(cfg), str(len(rs)), text, str(sum(1 for r in rs if r["cached"])))
    console.print(table)
    if ev.ablation:
        ab = Table("feature", "verdict", title="each feature alone on the baseline")
        for f, v in ev.ablation.items():
            ab.add_row(f, v)
        console.print(ab)


def answer_lines(result: RunResult) -> list[str]:
    """The answer in words (stdout)."""
    status, symptom, d = result.status, result.symptom.value if result.symptom else None, evidence_of(result)
    if status is Status.FOUND:  # the culprits, a known cost, where it shows, the timing
        culprits = sorted(result.culprits)
        lines = [f"{symptom}: caused by {' + '.join(culprits)}"]
        if extra := sorted(set(d.culprit_config) - set(culprits)):
            lines.append(f"  (together with {', '.join(extra)}, which change the loss on purpose)")
        if cost := result.known_cost:
            lines += [f"  known cost, not a bug: {cost.reason}", f"  fix: {cost.fix}", f"  source: {cost.source}"]
        if d.symptom_call:
            lines.append(f"  it shows in {d.symptom_call}")
        if (t := d.timing) is not None and t.ratio is not None and symptom == "slowdown":
            p = t.p_value
            support = "clear-cut" if t.fast else (f"p = {p:.3g}" if p is not None and p <= 0.05 else "")
            lines.append(
                f"  step time x{t.ratio:.2f} over {len(t.candidate)} interleaved runs"
                + (f" ({support})" if support else "")
            )
    elif status is Status.NONE:
        what = f"no {symptom}" if symptom else "no nan, crash, timeout, mismatch or slowdown"
        # a custom layer's own compute against its stand-in, or several features' combined overhead (bisect/replay.py)
        if cost := d.own_cost or d.combined_cost:
            lines = [f"none: {cost['reason']}"]
        else:
            lines = [f"none: the failing configuration (every feature on) shows {what} against the baseline"]
    elif status is Status.UNTESTABLE:
        lines = [f"untestable: {result.reason or result.error or 'nothing could be measured'}"]
        lines.append("  (not a verdict on the features: nothing was measured to judge them by)")
    elif result.flaky:
        rate = result.reproduction_rate
        rate_text = f" (reproduced in {rate:.0%} of runs)" if rate is not None else ""
        lines = [f"flaky {symptom or ''}{rate_text}: {result.error or ''}".rstrip()]
        if result.suspects:
            lines.append(f"  the search ended on: {', '.join(result.suspects)}")
    else:
        lines = [f"{status.value}: {result.error or ''}".rstrip()]
    if d.note:
        lines.append(f"note: {d.note}")
    for c in d.compile_differs:
        lines.append(
            f"note: {_config(c['configuration'])} compiled with jit_compile={c['jit_compile']}, "
            f"the failing configuration with {c['failing_jit_compile']}"
        )
    lines.extend(f"always on: {c['name']} (its OFF part does not run: {c['reason']})" for c in d.dropped_features)
    for seen in result.also_seen:
        lines.append(
            f"also seen: {seen.symptom}" + (f" (x{seen.ratio:g}, untimed)" if seen.ratio else "") + f"; {seen.hint}"
        )
    if d.detected:
        lines.append("features detected in memory (nothing written); `tfrepro annotate --write` to keep them")
    lines.extend(f"warning: {w}" for w in d.warnings)
    cached = sum(1 for r in d.trials_table if r["cached"])
    lines.append(f"{result.trials} trials ({cached} from cache), {result.wall_s:.1f} s; run: {result.run_dir}")
    return lines


def run_bisect(project: Any, options: Any, *, as_json: bool) -> RunResult:
    """Run the engine with a live display (none with `as_json`) and return its
    answer (SIGTERM interrupts like Ctrl-C: the CLI's `sigterm_interrupts`)."""
    from tfrepro.bisect.engine import bisect

    if as_json:
        return bisect(project, options)
    console = make_console()
    console.print(
        f"bisecting {project.root} ({len(project.feature_names)} features: {', '.join(project.feature_names)})"
    )
    progress = RichProgress(console)
    with progress.status:  # the spinner runs while the engine does
        result = bisect(project, options, events=progress)
    final_table(console, result)
    return result
