"""`tfrepro report --nightly`: does the exported repro still show the symptom
on TensorFlow's nightly build? (The bug form asks; triagers close issues
that are already fixed on nightly.)

The newest `tf-nightly` from the package index is installed once into the
user cache of per-release environments (`trials/envs.py`, the same store as
`bisect --tf-versions`); the exported repro (and its reference, when the
symptom needs one) re-runs there through the ordinary re-run
(`rerun.reproduce`). The answer fills the form's nightly question.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfrepro.errors import TfreproError
from tfrepro.report.answer import NightlyRun

NIGHTLY_DIST = "tf-nightly"


def newest_nightly(listing: Callable[[], Any] | None = None) -> str:
    """The newest tf-nightly version on the index (the cached listing when offline)."""
    from tfrepro.trials.envs import cache_root
    from tfrepro.trials.releases import list_releases, sort_versions

    got = (listing or (lambda: list_releases(NIGHTLY_DIST, cache_root())))()
    versions = sort_versions(list(got.versions))
    if not versions:
        raise TfreproError("no tf-nightly release installable here was found on the package index")
    return versions[-1]


def nightly_env(say: Callable[[str], None]) -> Any:
    """The environment of the newest nightly (built on first use), or the
    reason it cannot be had (a string)."""
    from tfrepro.trials.envs import EnvError, EnvStore, spec_for

    try:
        version = newest_nightly()
    except (TfreproError, OSError) as e:
        return f"tf-nightly: {e}"
    say(f"nightly: {NIGHTLY_DIST}=={version} (an environment in the user cache; the first time takes a minute)")
    try:
        return EnvStore().ensure(spec_for(version, tf_dist=NIGHTLY_DIST), lambda line: say(f"  {line}"))
    except EnvError as e:
        return f"no environment for {NIGHTLY_DIST} {version}: {e}"


def on_nightly(reproduce: Callable[[Any], Any], env: Any) -> NightlyRun:
    """The repro on tf-nightly (`env`: its environment, or why there is
    none); `reproduce(runner)` re-runs the export with the given runner."""
    if isinstance(env, str):
        return NightlyRun(NIGHTLY_DIST, None, env)
    from tfrepro.report.rerun import default_runner

    version = env.versions.get("tensorflow") or env.spec.tf_version
    with tempfile.TemporaryDirectory(prefix="tfrepro-nightly-") as tmp:
        rep = reproduce(default_runner(Path(tmp), python=str(env.python), versions=env.versions))
    return NightlyRun(f"{NIGHTLY_DIST} {version}", rep.reproduced, rep.detail)
