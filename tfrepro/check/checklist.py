"""The checklist's values and its text (pure): what `tfrepro check` reports.

`CheckReport` crosses layers (CLI, `bisect`'s baseline-fails result, JSON);
the judging that fills it lives in `tfrepro.check.judge`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, TypedDict


class CheckStatus(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class CheckItemDoc(TypedDict):
    """A `CheckItem` as JSON: `check --json`, a baseline-fails result's checks."""

    number: int
    key: str
    title: str
    status: str
    summary: str
    evidence: list[str]
    fix: str | None


class CheckReportDoc(TypedDict):
    """A `CheckReport` as JSON: `check --json`, a baseline-fails result's "checks"."""

    status: str
    reason: str | None
    flagged: list[str]
    project: str
    enabled: list[str]
    trial: dict[str, Any]
    checks: list[CheckItemDoc]


@dataclass(frozen=True)
class CheckItem:
    number: int
    key: str
    title: str
    status: CheckStatus
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str | None = None

    def to_dict(self) -> CheckItemDoc:
        return {**asdict(self), "status": self.status.value, "evidence": list(self.evidence)}


@dataclass(frozen=True)
class CheckReport:
    items: tuple[CheckItem, ...]
    project: str = ""
    enabled: tuple[str, ...] = ()
    trial: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def status(self) -> CheckStatus:
        """The worst status: fail > warn > pass (skips do not count)."""
        statuses = {i.status for i in self.items}
        return next((s for s in (CheckStatus.FAIL, CheckStatus.WARN) if s in statuses), CheckStatus.PASS)

    @property
    def ok(self) -> bool:
        return self.status is not CheckStatus.FAIL

    def item(self, key: str) -> CheckItem:
        return {i.key: i for i in reversed(self.items)}[key]  # the first of a key; KeyError when none

    def reason(self) -> str | None:
        """One line naming the likeliest cause: the first check of the worst
        status, fail or warn (checks run in causal order: data before loss)."""
        i = next((i for i in self.items if i.status is self.status is not CheckStatus.PASS), None)
        return None if i is None else f"check {i.number} ({i.title}) {i.status.value}s: {i.summary}"

    def to_dict(self) -> CheckReportDoc:
        return {
            "status": self.status.value,
            "reason": self.reason(),
            "flagged": [i.key for i in self.items if i.status in (CheckStatus.WARN, CheckStatus.FAIL)],
            "project": self.project,
            "enabled": list(self.enabled),
            "trial": dict(self.trial),
            "checks": [i.to_dict() for i in self.items],
        }


def fmt_num(x: float | None) -> str:
    return "?" if x is None else f"{x:.4g}"


def fmt_ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1000:.3g} ms"


def describe_tensor(t: dict) -> str:
    text = f"{tuple(t.get('shape', []))} {t.get('dtype')}"  # (64,) for one dimension
    if "min" in t:
        text += f" in [{fmt_num(t['min'])}, {fmt_num(t['max'])}], mean {fmt_num(t['mean'])}, std {fmt_num(t['std'])}"
    bad = [f"{t[k]} {label}" for k, label in (("nan", "NaN"), ("inf", "Inf")) if t.get(k)]
    if bad:
        text += ", " + " and ".join(bad)
    if t.get("note"):
        text += f" ({t['note']})"
    return text


def format_report(report: CheckReport, *, color: bool = False, verbose: bool = False) -> str:
    """The checklist as text: one line per check; the evidence of the checks
    that did not pass (of all with `verbose`) and the fix indented below."""
    import click  # only for styling; the text is the same without colour

    styles = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "red", CheckStatus.SKIP: None}
    what = "baseline (every feature off)" if not report.enabled else "with " + ", ".join(report.enabled)
    lines = [f"tfrepro check: {report.project}  [{what}]"]
    t = report.trial
    if t:
        lines.append(f"one probed trial: {t.get('mode')}, {t.get('steps_run')} step(s), {t.get('wall_s', 0):.1f} s")
    lines.append("")
    width = max(len(i.title) for i in report.items) if report.items else 0
    for i in report.items:
        flagged = i.status in (CheckStatus.WARN, CheckStatus.FAIL)
        mark = i.status.value.upper() if flagged else i.status.value  # WARN and FAIL stand out
        if color and styles[i.status]:
            mark = click.style(mark, fg=styles[i.status], bold=flagged)
        lines.append(f"{i.number}. {i.title:<{width}}  {mark}  {i.summary}")
        pad = " " * (width + 11)
        if verbose or i.status is not CheckStatus.PASS:
            lines += [f"{pad}{e}" for e in i.evidence]
        if i.fix:
            lines.append(f"{pad}fix: {i.fix}")
    errors = t.get("probe_errors") if t else None
    if errors:
        lines += ["", "probe errors: " + "; ".join(errors)]
    lines.append("")
    counts = Counter(i.status for i in report.items)  # "5 pass, 0 warn, 0 fail, 1 skipped"
    lines.append(", ".join(f"{counts[s]} {'skipped' if s is CheckStatus.SKIP else s.value}" for s in CheckStatus))
    return "\n".join(lines)
