"""Where a data read happened (inside/harness_data.caller): library frames
are told by their location, not by a name in their path."""

from __future__ import annotations

import json


def test_a_project_folder_named_after_a_library_is_the_users_code():
    """The data recorder's caller: by location, not by name (the test's own
    tmp dir, test_a_pandas_..., made every read of the script above look
    like pandas' own and the read was placed at the harness's exec line)."""
    from tfrepro.inside import harness_data

    assert not harness_data._library("/home/alice/pandas-demo/train.py")
    assert not harness_data._library("/home/alice/keras-bug/tensorflow_models/train.py")
    assert harness_data._library("/x/.venv/lib/python3.11/site-packages/pandas/io/parsers/readers.py")
    assert harness_data._library(harness_data.__file__) and harness_data._library("<frozen runpy>")
    assert harness_data._library(json.__file__)  # the standard library
