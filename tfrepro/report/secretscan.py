"""The last look at a finished bundle: does anything in it still look like a secret?

The `Scrubber` redacts while the bundle is written; this scan reads what was
written, with two independent eyes, so a secret that slipped past one rule (or
a file written without the scrubber) stops the report instead of being posted:

- detect-secrets (Yelp's scanner) with its default plugins and filters, over
  every text file of the bundle;
- the scrubber's own credential shapes: every line of every text file must be
  left unchanged by them (it is, once scrubbed).

What the bundle legitimately holds is not a finding: our redaction marker;
the hashes tfrepro writes itself, git commit shas (40 hex digits, named
`sha`/`commit` on their line) and sha256 trial-cache keys (64 hex digits),
which detect-secrets' hex-entropy plugin flags as "Hex High Entropy String"
(a W&B key is 40 hex digits too, so a 40-digit value counts as a commit only
where its line names it one, or where it is one of the commits the run
itself recorded, `run_commits`: a commit-mode run's `"label": "<sha>"`
lines); and absolute paths such as the re-run's log
directory, which its base64-entropy plugin flags. One default filter is off
(see `_DISABLED_FILTERS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from tfrepro.errors import UserError
from tfrepro.report.scrub import REDACTED, Scrubber, json_strings

HEX_KIND = "Hex High Entropy String"
BASE64_KIND = "Base64 High Entropy String"
OWN_KIND = "credential shape (tfrepro's redaction rules)"
# Files that hold no text: images and TensorBoard event files (binary records
# of our own scalar names and numbers).
_BINARY = re.compile(r"(\.png|\.jpe?g|\.gif|\.pdf)$|tfevents", re.IGNORECASE)
_SHA = re.compile(r"[0-9a-fA-F]{40}")
_SHA_KEYS = ("sha", "candidates", "good", "bad")
_COMMIT_CONTEXT = re.compile(r"(sha|commit|rev(ision)?)\W*$", re.IGNORECASE)
# detect-secrets drops every line shaped `x = f(...)` as an "indirect
# reference" (`secret = get_secret()`); in a repro such a line is
# `conn = connect(password="...")`, which is exactly what must be seen.
_DISABLED_FILTERS = ("detect_secrets.filters.heuristic.is_indirect_reference",)


@dataclass(frozen=True)
class Finding:
    """Something that looks like a secret: where, and what detector saw it
    (never the value itself: a finding is printed)."""

    file: str  # relative to the bundle, with `/`
    line: int
    kind: str


def scan_bundle(path: str | Path, commits: Iterable[str] = ()) -> list[Finding]:
    """Every finding in the text files under `path`, sorted by file and line.
    `commits`: full shas the run tried (`run_commits`), never a finding."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not _BINARY.search(p.name))
    texts: dict[Path, str] = {}
    for p in files:
        with suppress(OSError, UnicodeDecodeError):
            texts[p] = p.read_bytes().decode("utf-8")
    own = frozenset(c.lower() for c in commits if _SHA.fullmatch(c))
    shapes = Scrubber()  # the credential shapes alone: no environment values, no home directory
    found = set(_detect_secrets(root, texts, own)) | {
        Finding(p.relative_to(root).as_posix(), n, OWN_KIND)
        for p, text in texts.items()
        for n, line in enumerate(text.splitlines(), 1)
        if shapes.scrub(line) != line
    }
    return sorted(found, key=lambda f: (f.file, f.line, f.kind))


def run_commits(result: dict) -> frozenset[str]:
    """The full shas a commit-mode run recorded (its `tried` and trials-table
    rows, the first bad commit, candidates...: every value of a `sha`,
    `*_commit` or `candidates` key): git wrote them, tfrepro recorded them.
    Nothing in a feature or version run."""
    found = json_strings(result)
    return frozenset(s.lower() for k, s in found if _SHA.fullmatch(s) and (k in _SHA_KEYS or k.endswith("_commit")))


def raise_on_findings(findings: Iterable[Finding], bundle: str | Path | None = None) -> None:
    """A UserError naming file:line of each finding, if there is any.

    The first finding is the error's place (`path`, `line`), every finding
    is listed in the message, and the hint says how to get a clean bundle."""
    findings = list(findings)
    if not findings:
        return
    base, first = Path(bundle or ""), findings[0]
    lines = "\n".join(f"  {base / f.file}:{f.line}: {f.kind}" for f in findings)
    raise UserError(
        f"the bundle still holds {len(findings)} secret-looking value(s); it must not be shared as is:\n{lines}",
        path=base / first.file,
        line=first.line,
        hint="remove the credential from the project (read it from an environment variable instead), "
        "or put it in an environment variable whose name says KEY/TOKEN/SECRET/PASSWORD so the "
        "report redacts its value, then run `tfrepro report` again",
    )


def _detect_secrets(root: Path, texts: dict[Path, str], commits: frozenset[str] = frozenset()) -> Iterator[Finding]:
    from detect_secrets.core import scan
    from detect_secrets.settings import default_settings, get_settings

    with default_settings():
        get_settings().disable_filters(*_DISABLED_FILTERS)
        for p, text in texts.items():
            lines = text.splitlines()
            for secret in scan.scan_file(str(p)):
                n = secret.line_number
                line = lines[n - 1] if 0 < n <= len(lines) else ""
                value = str(secret.secret_value or "")
                if _is_ours(secret.type, value, line) or (secret.type == HEX_KIND and value.lower() in commits):
                    continue
                yield Finding(p.relative_to(root).as_posix(), n, secret.type)


def _is_ours(kind: str, value: str, line: str) -> bool:
    """The redaction marker, or a hash that tfrepro itself wrote."""
    if not value or "redacted" in value.lower() or value in REDACTED:
        return True
    # an absolute path (the re-run's log directory under /tmp), which the base64-entropy plugin takes for a key:
    # at least three segments, two of them plain words (`tmp`, `state`), which a random key does not have
    if kind == BASE64_KIND and re.fullmatch(r"~?(/[\w.+-]+){3,}/?", value):
        return sum(seg.isalpha() and seg.islower() and len(seg) >= 3 for seg in value.split("/")) >= 2
    # sha256 (trial-cache keys, content hashes), or a commit named so on its line
    before = line[: max(line.find(value), 0)].rstrip(" \"':=")
    return kind == HEX_KIND and (len(value) == 64 or len(value) == 40 and bool(_COMMIT_CONTEXT.search(before)))
