"""A warm child's temporary directory is its own trial's, as a cold
interpreter's is (issue 26, the wild timeseries case): the server's imports
(TensorFlow's) call `tempfile.gettempdir()`, which caches the server's
TMPDIR; a forked child kept it, so `ModelCheckpoint(".keras")` wrote under
the server's dir, which Landlock denies ("writes outside its directory")."""

from __future__ import annotations

import json
import textwrap

import pytest

from tfrepro.settings import TrialSettings
from tfrepro.trials import warm
from tfrepro.trials.runner import run_variant
from tfrepro.trials.trial import TrialOptions

SCRIPT = """\
import json, os, tempfile
fd, path = tempfile.mkstemp()
os.close(fd)
print(json.dumps({"tempdir": tempfile.gettempdir(), "file": path, "env": os.environ["TMPDIR"]}))
print("step=1 loss=0.5")
"""


@pytest.fixture
def pool_and_env(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "caches_tempdir.py").write_text("import tempfile\n\ntempfile.gettempdir()\n")
    p = warm.WarmPool(preload=("caches_tempdir",), only_tf_scripts=False)
    yield p, {"PYTHONPATH": str(mods)}
    p.close()


def test_a_warm_child_writes_temp_files_in_its_own_trial_dir(tmp_path, pool_and_env):
    pool, env = pool_and_env
    d = tmp_path / "variant"
    d.mkdir()
    (d / "s.py").write_text(textwrap.dedent(SCRIPT))
    settings = TrialSettings(command=("python", "s.py"), steps=10, timeout_s=30.0)
    seen = {}
    for how in ("cold", "warm"):
        trial = tmp_path / f"trial-{how}"
        result = run_variant(d, settings, trial, TrialOptions(env=env, cold=how == "cold"), warm_pool=pool)
        assert result.extra["process"] == how and not result.crashed, (trial / "stderr.log").read_text()
        seen[how] = json.loads((trial / "stdout.log").read_text().splitlines()[0])
        assert seen[how]["tempdir"] == seen[how]["env"] == str(trial / "tmp")
        assert seen[how]["file"].startswith(str(trial / "tmp") + "/")
