"""Installed distributions' versions from package metadata (nothing imported).
TF_DISTS, the names TensorFlow is installed under, lives in
`inside/envprobe.py` (it runs in the trial process and may not import tfrepro)."""

from __future__ import annotations

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


def tf_version() -> str | None:
    """The installed TensorFlow's version, without importing it."""
    return dist_version(*TF_DISTS)
