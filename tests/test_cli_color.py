"""NO_COLOR (https://no-color.org) is honoured on a terminal too."""

from __future__ import annotations

import io
import re

from tfrepro.bisect.result_doc import FeatureEvidence
from tfrepro.cli import app, display
from tfrepro.trials.values import RunResult, Status

COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-9]|9[0-7])(;[0-9]+)*m")  # a foreground colour SGR


def _printed(**kw) -> str:
    buf = io.StringIO()
    console = display.make_console(file=buf, force_terminal=True, **kw)
    console.print("[bold red]nan[/bold red] [green]ok[/green]")
    display.final_table(
        console,
        RunResult(
            Status.FOUND,
            evidence=FeatureEvidence(trials_table=({"enabled": ["a"], "verdict": "nan", "cached": False},)),
        ),
    )
    return buf.getvalue()


def test_colour_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert COLOUR.search(_printed())


def test_no_color_removes_colour_on_a_terminal(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    out = _printed()
    assert "nan" in out and not COLOUR.search(out)


def test_empty_no_color_does_not_count(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "")
    assert COLOUR.search(_printed())


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_check_colour_follows_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert app.use_color(_Tty()) and not app.use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "yes")
    assert not app.use_color(_Tty())
