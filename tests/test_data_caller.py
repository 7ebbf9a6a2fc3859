"""Where a data read happened (inside/harness_data.user_where): library frames
are told by their location, not by a name in their path."""

from __future__ import annotations

import json


def test_a_project_folder_named_after_a_library_is_the_users_code():
    """The data recorder's caller: by location, not by name (the test's own
    tmp dir, test_a_pandas_..., made every read of the script above look
    like pandas' own and the read was placed at the harness's exec line)."""
    from tfrepro.inside import harness_data

    assert not harness_data.is_library("/home/alice/pandas-demo/train.py")
    assert not harness_data.is_library("/home/alice/keras-bug/tensorflow_models/train.py")
    assert harness_data.is_library("/x/.venv/lib/python3.11/site-packages/pandas/io/parsers/readers.py")
    assert harness_data.is_library(harness_data.__file__) and harness_data.is_library("<frozen runpy>")
    assert harness_data.is_library(json.__file__)  # the standard library


def test_one_rule_finds_the_users_file_line_for_fits_reads_and_writes(tmp_path):
    """harness_data.user_where, the one finder (a fit's call site, a data
    read's, confine's write outside): the first user frame under the root,
    relative to it; a library's frame under the root (a project's .venv)
    is skipped; else the first user frame anywhere, absolute; else None."""
    from types import SimpleNamespace

    from tfrepro.inside import harness_data

    def frame(path: str):
        return SimpleNamespace(f_code=SimpleNamespace(co_filename=path))

    root = str(tmp_path)
    venv = frame(f"{root}/.venv/lib/python3.11/site-packages/keras/src/saving.py")
    user, elsewhere = frame(f"{root}/sub/train.py"), frame("/opt/helpers/data.py")
    assert harness_data.user_where([(venv, 3), (elsewhere, 9), (user, 12)], root) == "sub/train.py:12"
    assert harness_data.user_where([(venv, 3), (elsewhere, 9)], root) == "/opt/helpers/data.py:9"
    assert harness_data.user_where([(venv, 3), (frame("<frozen runpy>"), 1)], root) is None
