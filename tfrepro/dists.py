"""Installed distributions' versions from package metadata (nothing imported).
TF_DISTS, the names TensorFlow is installed under, lives in
`inside/envprobe.py` (it runs in the trial process and may not import tfrepro).
The versions a trial runs with are read by `versions` here, by `VERSIONS_SCRIPT` in another interpreter."""

from __future__ import annotations

import sys
from contextlib import suppress
from functools import cache
from importlib import metadata

from tfrepro.inside.envprobe import TF_DISTS


@cache
def dist_version(*names: str) -> str | None:
    """The version of the first of `names` that is installed, else None."""
    for name in names:
        with suppress(metadata.PackageNotFoundError):
            return metadata.version(name)
    return None


# Each version a trial runs with, and the distribution names it is read under (the first installed).
VERSION_DISTS = {"tensorflow": TF_DISTS, "keras": ("keras",), "tf_keras": ("tf_keras", "tf-keras")}


def versions() -> dict[str, str | None]:
    """Python's version here, and TensorFlow's, Keras's and tf_keras's (None: not installed)."""
    return {"python": sys.version.split()[0], **{k: dist_version(*names) for k, names in VERSION_DISTS.items()}}


# `versions()` of another interpreter, printed as JSON (run with -I: stdlib only).
VERSIONS_SCRIPT = f"""\
import importlib.metadata as m, json, sys
def v(names):
    for n in names:
        try:
            return m.version(n)
        except m.PackageNotFoundError:
            pass
print(json.dumps({{"python": sys.version.split()[0], **{{k: v(n) for k, n in {VERSION_DISTS!r}.items()}}}}))
"""
