"""CI as a stranger's machine: no test may rely on the user cache.

A fresh clone on a fresh machine has no `~/.cache/tfrepro` (TensorFlow
release environments, the git-versioned templates, release listings). So,
for the whole session, before anything is collected:

- `XDG_CACHE_HOME` points at an empty temporary directory (and
  `TFREPRO_CACHE_DIR` is dropped), for this process and every subprocess a
  test starts: tfrepro's cache is a fresh machine's;
- an audit hook (`sys.addaudithook`) records every open, listing, creation,
  rename or removal under the real cache directory, and the test during
  which it happened fails loudly, naming the path.

A test that needs the real cache opts in twice: it is marked
`@pytest.mark.user_cache`, and the session runs with
`TFREPRO_TEST_USER_CACHE=1` (then the cache is not redirected, and only
marked tests may touch it).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tfrepro.trials import state

OPT_IN = os.environ.get("TFREPRO_TEST_USER_CACHE") == "1"


def _real_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("TFREPRO_CACHE_DIR") or Path(base) / "tfrepro").expanduser().resolve()


REAL_CACHE = _real_cache()
_PREFIX = str(REAL_CACHE)
_FRESH = None
_FRESH_LOCK = -1
if not OPT_IN:
    # owned (trials/state.py: `owned`): a worker killed by a signal never reaches
    # pytest_unconfigure, and the next session sweeps its dir
    _FRESH, _FRESH_LOCK = state.make("tfrepro-test-cache-")
    os.environ["XDG_CACHE_HOME"] = _FRESH
    os.environ.pop("TFREPRO_CACHE_DIR", None)

_TOUCHED: list[tuple[str, str]] = []  # (event, path) since the current test began
_EVENTS = {"open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree"}


def _audit(event: str, args: tuple) -> None:
    if event not in _EVENTS or not args:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str | os.PathLike):
        return
    text = os.path.abspath(os.fspath(path))
    if text == _PREFIX or text.startswith(_PREFIX + os.sep):
        _TOUCHED.append((event, text))


sys.addaudithook(_audit)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "user_cache: reads or writes the real ~/.cache/tfrepro (opt-in)")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _FRESH:
        shutil.rmtree(_FRESH, ignore_errors=True)
        os.close(_FRESH_LOCK)


@pytest.fixture(autouse=True)
def _no_user_cache(request: pytest.FixtureRequest):
    """Fail the test that touched the real user cache (unless it opted in)."""
    _TOUCHED.clear()
    yield
    touched, _TOUCHED[:] = list(_TOUCHED), []
    if touched and request.node.get_closest_marker("user_cache") is None:
        event, path = touched[0]
        pytest.fail(
            f"this test touched the user cache ({event} {path}, {len(touched)} access(es)): a fresh machine "
            "has none. Give the code a cache of its own (tmp_path), or mark the test @pytest.mark.user_cache "
            "and run with TFREPRO_TEST_USER_CACHE=1",
            pytrace=False,
        )
