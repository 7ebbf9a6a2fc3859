"""One list of TensorFlow's distribution names, one way to read its version."""

from __future__ import annotations

import sys
from importlib import metadata

from tfrepro import dists
from tfrepro.cli.app import version_line
from tfrepro.trials import envs


def test_every_reader_gives_the_installed_tensorflow():
    installed = metadata.version("tensorflow")
    assert dists.dist_version(*dists.TF_DISTS) == installed
    assert dists.versions()["tensorflow"] == installed
    assert envs.read_versions(sys.executable) == dists.versions()
    assert f"TensorFlow {installed}," in version_line()
    assert envs.TF_STACK >= set(dists.TF_DISTS)


def test_the_version_comes_from_any_of_the_names(monkeypatch):
    dists.dist_version.cache_clear()
    monkeypatch.setattr(dists.metadata, "version", lambda n: {"intel-tensorflow": "2.9.0"}.get(n) or _missing(n))
    try:
        assert dists.versions()["tensorflow"] == "2.9.0" and dists.dist_version("keras") is None
        assert envs.detect_tf_dist() == "tensorflow"
    finally:
        dists.dist_version.cache_clear()


def _missing(name):
    raise metadata.PackageNotFoundError(name)
