"""`tfrepro.toml` (Contract 2): read and validated up front.

Every unknown table or key, wrong type and out-of-range value is a
`UserError` naming the file and the line, with a hint, before anything runs.
The tables are strict pydantic models (manifest_schema.py, imported only when
there is a file to validate); `first_error` words their first error (unknown
tables, a table that is none, the bounds, then the keys as written).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tfrepro.errors import UserError
from tfrepro.projectfiles import MANIFEST
from tfrepro.settings import StateSettings, SymptomSettings, TrialSettings

if TYPE_CHECKING:
    from tfrepro.manifest_schema import FeatureConfig


@dataclass(frozen=True)
class Manifest:
    trial: TrialSettings = TrialSettings()
    repeats: int = 1
    symptoms: SymptomSettings = SymptomSettings()
    features: dict[str, FeatureConfig] = field(default_factory=dict)
    path: str | None = None
    state: StateSettings = StateSettings()

    @classmethod
    def parse(cls, text: str, path: str = MANIFEST) -> "Manifest":
        """Validate a `tfrepro.toml` text (Contract 2). Raises UserError."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            m = re.search(r"\(at line (\d+)", str(e))
            raise UserError(
                f"not valid TOML: {e}",
                path=path,
                line=int(m.group(1)) if m else None,
                hint="see https://toml.io for the syntax",
            ) from None
        import pydantic

        from tfrepro import manifest_schema

        try:
            doc = manifest_schema.Document.model_validate(data)
        except pydantic.ValidationError as e:
            msg, table, key, hint = manifest_schema.first_error(e, data)
            raise UserError(msg, path=path, line=line_of(text, table, key), hint=hint) from None
        return cls(
            # the values as validated (model_dump would turn `command`'s tuple back into a list)
            trial=TrialSettings(**{k: getattr(doc.trial, k) for k in doc.trial.model_fields_set - {"repeats"}}),
            repeats=doc.trial.repeats or 1,
            symptoms=SymptomSettings(**doc.symptoms.model_dump(exclude_unset=True)),
            features=doc.features,
            path=path,
            state=StateSettings(**doc.state.model_dump(exclude_unset=True)),
        )


def line_of(text: str, table: str, key: str | None) -> int | None:
    """Best-effort line number of `[table]` / `key =` in a TOML text."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]")
    at = next((i + 1 for i, line in enumerate(lines) if header.match(line)), None)  # the header's line
    if key is None:
        return at
    keyre = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(at or 0, len(lines)):  # within the table, or anywhere without its header
        if at is not None and lines[i].lstrip().startswith("["):
            break
        if keyre.match(lines[i]):
            return i + 1
    return at


def read_manifest(root: Path) -> tuple[str, Manifest]:
    """The project's `tfrepro.toml`, validated, and its text (for line
    numbers); without one, "" and the defaults."""
    manifest_path = root / MANIFEST
    if manifest_path.is_dir():
        raise UserError(
            f"{MANIFEST} is a directory, not a file",
            path=manifest_path,
            hint=f"remove or rename that directory ({MANIFEST} is tfrepro's settings file)",
        )
    if not manifest_path.exists():
        return "", Manifest()
    data = manifest_path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            "not UTF-8 text (TOML files are UTF-8)",
            path=manifest_path,
            line=data[: e.start].count(b"\n") + 1,
            hint="save tfrepro.toml as UTF-8",
        ) from None
    return text, Manifest.parse(text, str(manifest_path))
