"""Declare `affects_loss = true` features in `tfrepro.toml` without ever
destroying what the user wrote: the text is edited by lines, then read back
with tomllib and compared with the intended data; anything else is a problem
reported to the user, and the file is left alone."""

from __future__ import annotations

import copy
import re
import tomllib

from tfrepro.projectfiles import MANIFEST

_HEADER = (
    "# Written by `tfrepro annotate`: the script a trial runs, and the features that\n"
    "# change the loss on purpose (never blamed for a loss mismatch).\n"
)


def _under(text: str, table: str, line: str) -> str | None:
    """`line` added right under the `[table]` header (its dotted parts may
    be spaced, a comment may follow it), None when there is no such header."""
    parts = r"[ \t]*\.[ \t]*".join(map(re.escape, table.split(".")))
    m = re.search(r"^[ \t]*\[[ \t]*" + parts + r"[ \t]*\][ \t]*(#.*)?$", text, re.M)
    return None if m is None else text[: m.end()] + "\n" + line + text[m.end() :]


def merge(existing: str | None, affects_loss: list[str], entry: str | None) -> tuple[str | None, list[str]]:
    """(new manifest text or None when nothing changes, problems).

    `entry`: the script trials should run, written as `[trial] entry` when the
    manifest says neither `entry` nor `command` (None: leave [trial] alone)."""
    names = sorted(set(affects_loss))
    if not names and not entry:
        return None, []
    if existing is None:
        text = _HEADER
        if entry:
            text += f'\n[trial]\nentry = "{entry}"\n'
        for n in names:
            text += f"\n[features.{n}]\naffects_loss = true\n"
        return text, []
    try:
        data = tomllib.loads(existing)
    except tomllib.TOMLDecodeError as e:
        return None, [f"{MANIFEST} is not valid TOML ({e}); add affects_loss = true for {', '.join(names)} by hand"]
    if not isinstance(feats := data.get("features", {}), dict):
        return None, [f"{MANIFEST}: `features` is not a table; left alone"]
    problems: list[str] = []
    want = copy.deepcopy(data)
    text = existing
    trial = data.get("trial", {})
    if entry and isinstance(trial, dict) and "entry" not in trial and "command" not in trial:
        want.setdefault("trial", {})["entry"] = entry
        line = f'entry = "{entry}"'
        text = _under(text, "trial", line) or f"[trial]\n{line}\n\n" + text  # a new [trial] table first
    for n in names:
        cfg = feats.get(n)
        if isinstance(cfg, dict) and "affects_loss" in cfg:
            if cfg["affects_loss"] is not True:
                problems.append(
                    f"{MANIFEST} says affects_loss = {cfg['affects_loss']!r} for {n}; "
                    "left as is (the annotator would have said true)"
                )
            continue
        want.setdefault("features", {}).setdefault(n, {})["affects_loss"] = True
        table = ("" if text.endswith("\n") else "\n") + f"\n[features.{n}]\naffects_loss = true\n"  # a new one last
        text = _under(text, f"features.{n}", "affects_loss = true") or text + table
    if text == existing:
        return None, problems
    try:
        if tomllib.loads(text) != want:
            raise ValueError
    except (tomllib.TOMLDecodeError, ValueError):
        what = ", ".join([f"affects_loss = true for {n}" for n in names] + ([f'entry = "{entry}"'] if entry else []))
        return None, problems + [f"could not add {what} to {MANIFEST} safely; add it by hand"]
    return text, problems
