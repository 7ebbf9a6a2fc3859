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


def _with_entry(text: str, entry: str) -> str:
    """`entry = "..."` added under [trial] (a new [trial] table first when there is none)."""
    header = re.compile(r"^[ \t]*\[[ \t]*trial[ \t]*\][ \t]*(#.*)?$", re.M)
    m = header.search(text)
    line = f'entry = "{entry}"'
    if m:
        return text[: m.end()] + "\n" + line + text[m.end() :]
    return f"[trial]\n{line}\n\n" + text


def merge(existing: str | None, affects_loss: list[str], entry: str | None) -> tuple[str | None, list[str]]:
    """(new manifest text or None when nothing changes, problems).

    `entry`: the script trials should run, written as `[trial] entry` when the
    manifest says neither `entry` nor `command` (None: leave [trial] alone)."""
    names = sorted(set(affects_loss))
    if not names and not entry:
        return None, []
    if existing is None:
        text = _HEADER
        if entry and entry != "repro.py":
            text += f'\n[trial]\nentry = "{entry}"\n'
        for n in names:
            text += f"\n[features.{n}]\naffects_loss = true\n"
        return text, []
    try:
        data = tomllib.loads(existing)
    except tomllib.TOMLDecodeError as e:
        return None, [f"{MANIFEST} is not valid TOML ({e}); add affects_loss = true for {', '.join(names)} by hand"]
    feats = data.get("features", {}) if isinstance(data.get("features", {}), dict) else None
    if feats is None:
        return None, [f"{MANIFEST}: `features` is not a table; left alone"]
    problems: list[str] = []
    want = copy.deepcopy(data)
    text = existing
    trial = data.get("trial", {})
    if entry and isinstance(trial, dict) and "entry" not in trial and "command" not in trial:
        want.setdefault("trial", {})["entry"] = entry
        text = _with_entry(text, entry)
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
        header = re.compile(r"^[ \t]*\[[ \t]*features[ \t]*\.[ \t]*" + re.escape(n) + r"[ \t]*\][ \t]*(#.*)?$", re.M)
        m = header.search(text)
        if m:
            end = m.end()
            text = text[:end] + "\naffects_loss = true" + text[end:]
        else:
            if not text.endswith("\n"):
                text += "\n"
            text += f"\n[features.{n}]\naffects_loss = true\n"
    if text == existing:
        return None, problems
    try:
        if tomllib.loads(text) != want:
            raise ValueError
    except (tomllib.TOMLDecodeError, ValueError):
        what = ", ".join([f"affects_loss = true for {n}" for n in names] + ([f'entry = "{entry}"'] if entry else []))
        return None, problems + [f"could not add {what} to {MANIFEST} safely; add it by hand"]
    return text, problems
