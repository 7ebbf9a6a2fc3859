"""Installed distributions' versions from package metadata (nothing imported),
and the one list of the names TensorFlow is installed under.

`tfrepro/inside/envprobe.py` runs in the trial process and may not import
tfrepro: it keeps a copy of TF_DISTS (tests/test_dists.py checks they agree)."""

from __future__ import annotations

from functools import cache
from importlib import metadata

# The distributions that install the `tensorflow` package, in the order a
# version is looked up when several are installed.
TF_DISTS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tf-nightly",
    "tf-nightly-cpu",
    "tensorflow-macos",
    "tensorflow-intel",
    "intel-tensorflow",
)


@cache
def dist_version(*names: str) -> str | None:
    """The version of the first of `names` that is installed, else None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def tf_version() -> str | None:
    """The installed TensorFlow's version, without importing it."""
    return dist_version(*TF_DISTS)
