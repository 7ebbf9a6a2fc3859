"""Version mode with fakes: release lists and ranges, the env cache, the search."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from tfrepro.bisect import versions as vmode
from tfrepro.bisect.events import BisectOptions
from tfrepro.bisect.versions import Row, follows, order_range
from tfrepro.errors import UserError
from tfrepro.settings import TrialSettings
from tfrepro.trials import envs, releases
from tfrepro.trials.envs import EnvError, EnvSpec, EnvStore
from tfrepro.trials.trial import TrialOptions
from tfrepro.trials.values import TrialResult
from tfrepro.verdicts import Verdict

# -- releases -------------------------------------------------------------------------

FAKE_RELEASES = [
    "2.13.1",
    "2.14.0rc0",
    "2.14.0",
    "2.14.1",
    "2.15.0",
    "2.15.0.post1",
    "2.15.1",
    "2.16.0rc0",
    "2.16.1",
    "2.16.2",
    "2.17.0.dev20240101",
    "2.17.0",
    "2.17.1",
    "2.18.0rc2",
]


def fake_listing() -> releases.Listing:
    return releases.Listing("tensorflow-cpu", tuple(releases.sort_versions(FAKE_RELEASES)))


def test_order_puts_prereleases_and_posts_where_pep440_does():
    assert releases.sort_versions(["2.16.1", "2.16.0rc0", "2.15.0.post1", "2.15.0", "2.9.3", "2.16.0.dev1"]) == [
        "2.9.3",
        "2.15.0",
        "2.15.0.post1",
        "2.16.0.dev1",
        "2.16.0rc0",
        "2.16.1",
    ]


def test_range_holds_final_releases_only_one_per_release():
    versions, _ = releases.expand("2.14..2.17", fake_listing)
    assert versions == ["2.14.0", "2.14.1", "2.15.0.post1", "2.15.1", "2.16.1", "2.16.2", "2.17.0", "2.17.1"]


def test_range_ends_are_inclusive_and_short_ends_cover_their_series():
    assert releases.expand("2.14.1..2.16.1", fake_listing)[0] == ["2.14.1", "2.15.0.post1", "2.15.1", "2.16.1"]
    assert releases.expand("2.16..2.16", fake_listing)[0] == ["2.16.1", "2.16.2"]


def test_explicit_versions_do_not_ask_the_index_and_may_be_prereleases():
    def no_index():
        raise AssertionError("the index was asked")

    assert releases.expand("2.16.0rc0,2.14.1, 2.15.1", no_index)[0] == ["2.14.1", "2.15.1", "2.16.0rc0"]


def test_mixed_list_and_range_and_bad_input():
    assert releases.expand("2.13.1,2.17..2.18", fake_listing)[0] == ["2.13.1", "2.17.0", "2.17.1"]
    for bad in ("", "2.15.1", "2.x", "..2.17", "3.0..3.1"):
        with pytest.raises(UserError):
            releases.expand(bad, fake_listing)


def test_wheel_listing_keeps_this_python_and_platform_and_drops_yanked():
    files = [
        {"filename": "tensorflow_cpu-2.15.1-cp311-cp311-manylinux_2_17_x86_64.whl"},
        {"filename": "tensorflow_cpu-2.10.0-cp310-cp310-manylinux_2_17_x86_64.whl"},
        {"filename": "tensorflow_cpu-2.16.1-cp311-cp311-manylinux_2_17_x86_64.whl", "yanked": True},
        {"filename": "tensorflow_cpu-2.16.2-cp311-cp311-win_amd64.whl"},
        {"filename": "tensorflow_cpu-2.16.2-cp311-cp311-manylinux_2_17_x86_64.whl"},
        {"filename": "tensorflow_cpu-2.15.1.tar.gz"},
    ]
    got = releases.wheel_versions(files, "tensorflow-cpu", "cp311", "linux")
    assert got.versions == ("2.15.1", "2.16.2")
    assert dict(got.excluded) == {"2.10.0": "no cp311 wheel for linux", "2.16.1": "yanked"}


def test_listing_is_cached_and_offline_uses_the_stale_copy(tmp_path):
    body = json.dumps({"files": [{"filename": "tensorflow_cpu-2.15.1-cp311-cp311-manylinux_2_17_x86_64.whl"}]})
    calls = []

    def fetch(url):
        calls.append(url)
        return body.encode()

    def offline(url):
        raise OSError("network is unreachable")

    tag = f"cp{os.sys.version_info[0]}{os.sys.version_info[1]}"
    body = body.replace("cp311", tag)
    first = releases.list_releases("tensorflow-cpu", tmp_path, fetch=fetch, now=1000.0)
    again = releases.list_releases("tensorflow-cpu", tmp_path, fetch=fetch, now=2000.0)
    assert first.versions == again.versions == ("2.15.1",) and len(calls) == 1
    stale = releases.list_releases("tensorflow-cpu", tmp_path, fetch=offline, now=1e9)
    assert stale.stale and stale.versions == ("2.15.1",)
    with pytest.raises(UserError, match="cannot list the tensorflow releases"):
        releases.list_releases("tensorflow", tmp_path, fetch=offline)


# -- environments -------------------------------------------------------------------------


def spec(version="2.15.1", **kw) -> EnvSpec:
    return EnvSpec(
        **{
            "tf_dist": "tensorflow-cpu",
            "tf_version": version,
            "python": "/usr/bin/python3.11",
            "python_version": "3.11",
            **kw,
        }
    )


class FakeInstaller:
    name = "fake"

    def commands(self, path, spec):
        return [["venv", str(path)], ["install", str(path), *spec.packages()]]


def fake_store(tmp_path, fail=()):
    runs = []

    def run(argv, on_line):
        runs.append(list(argv))
        if argv[0] == "venv":
            (Path(argv[1]) / "bin").mkdir(parents=True)
            (Path(argv[1]) / "bin" / "python").write_text("")
            return 0, []
        if any(p.endswith(v) for p in argv for v in fail):
            on_line("ERROR: No matching distribution")
            return 1, ["ERROR: No matching distribution"]
        on_line("Installed 42 packages")
        return 0, ["Installed 42 packages"]

    def probe(python):
        return {"python": "3.11.7", "tensorflow": "x", "keras": "2.15.0", "tf_keras": None}

    clock = iter(range(10**6))
    return EnvStore(
        tmp_path / "envs", installer=FakeInstaller(), run=run, probe=probe, clock=lambda: float(next(clock))
    ), runs


def test_env_is_built_once_then_reused_and_named_for_people(tmp_path):
    store, runs = fake_store(tmp_path)
    lines = []
    env = store.ensure(spec(), lines.append)
    assert len(runs) == 2 and env.name.startswith("tf-2.15.1-cpu-py3.11-") and env.versions["keras"] == "2.15.0"
    assert any("Installed 42 packages" in line for line in lines)
    again = store.ensure(spec(), lines.append)
    assert lines[-1].endswith(": reused") and again.path == env.path and len(runs) == 2  # built once


def test_spec_change_rebuilds_and_half_built_env_is_never_reused(tmp_path):
    store, runs = fake_store(tmp_path)
    a = store.ensure(spec())
    b = store.ensure(spec(requirements=("numpy<2",)))
    assert a.path != b.path and len(runs) == 4
    (b.path / envs.SPEC_FILE).unlink()  # interrupted before the spec file: half built
    assert store.ready(spec(requirements=("numpy<2",))) is None
    c = store.ensure(spec(requirements=("numpy<2",)))
    assert c.path == b.path and len(runs) == 6  # built again


def test_failed_install_leaves_nothing_and_says_why(tmp_path):
    store, _ = fake_store(tmp_path, fail=("==2.99.0",))
    with pytest.raises(EnvError, match="No matching distribution"):
        store.ensure(spec("2.99.0"))
    assert not store.path(spec("2.99.0")).exists()


def test_prune_removes_incomplete_old_and_orphaned_envs(tmp_path):
    store, _ = fake_store(tmp_path)
    fresh = store.ensure(spec())
    old = store.ensure(spec("2.14.1"))
    os.utime(old.path / envs.SPEC_FILE, (0, 0))
    (store.root / "tf-2.16.2-cpu-py3.11-deadbeef").mkdir()  # half built
    store.clock = lambda: 40 * 86400.0
    removed = {info.name: why for info, why in store.prune(max_age_days=30)}
    assert set(removed) == {old.name, "tf-2.16.2-cpu-py3.11-deadbeef"}
    assert removed["tf-2.16.2-cpu-py3.11-deadbeef"] == "incomplete build"
    assert [i.name for i in store.entries()] == [fresh.name]
    assert envs.envs_report(store, prune=True, everything=True)[1] == [f"removed {fresh.name} (asked for)"]
    assert envs.envs_report(store)[1] == [f"no environments in {store.root}"]


def test_prune_keeps_the_lock_a_waiting_builder_holds(tmp_path):
    """Prune lets an environment's lock go and leaves its lock file: a builder
    that waited on it while prune removed the environment still keeps the
    next prune off its build (a removed lock file gave that prune a fresh,
    free lock, and it deleted the build under way)."""
    store, _ = fake_store(tmp_path)
    env = store.ensure(spec())
    with open(store.root / f".{env.name}.lock") as builder:  # opened while prune holds it: waiting
        assert [info.name for info, _ in store.prune(everything=True)] == [env.name]
        fcntl.flock(builder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its turn: it builds
        env.path.mkdir()
        assert store.prune(everything=True) == [] and env.path.is_dir()  # being built: left alone
    assert [info.name for info, _ in store.prune(everything=True)] == [env.name]  # its builder is gone


def test_spec_packages_pin_tf_and_add_tf_keras_only_from_keras3():
    assert spec("2.16.2", legacy_keras=True).packages() == ["tensorflow-cpu==2.16.2", "tf_keras>=2.16,<2.17"]
    assert spec("2.15.1", legacy_keras=True).packages() == ["tensorflow-cpu==2.15.1"]
    assert "-tfkeras-" in spec("2.16.2", legacy_keras=True).name


def test_project_requirements_leave_tensorflow_keras_and_tfrepro_out(tmp_path):
    (tmp_path / "requirements.txt").write_text("numpy<2  # pinned\ntensorflow==2.15\n-e .\nkeras>=3\npandas\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname="x"\ndependencies=["tfrepro", "Tf_Keras", "scipy"]\n')
    kept, dropped = envs.project_requirements(tmp_path)
    assert kept == ("numpy<2", "pandas", "scipy")
    assert set(dropped) == {"tensorflow==2.15", "-e .", "keras>=3", "tfrepro", "Tf_Keras"}


def test_cache_root_respects_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert envs.cache_root() == tmp_path / "tfrepro"
    assert EnvStore().root == tmp_path / "tfrepro" / "envs"


# -- the search ------------------------------------------------------------------------------


def bisect_versions(*args, **kwargs) -> dict:
    return vmode.bisect_versions(*args, **kwargs).to_dict()


def project(tmp_path) -> Path:
    (tmp_path / "repro.py").write_text("import tensorflow as tf\nprint(tf.keras)\n")
    return tmp_path


def ok(version, keras="2.15.0") -> TrialResult:
    return TrialResult(
        losses=(1.0, 0.9, 0.8),
        steps_run=3,
        mode="fit",
        tf_version=version,
        extra={"versions": {"tensorflow": version, "keras": keras}, "keras": "keras"},
    )


def crash(version, keras="3.3.3") -> TrialResult:
    return TrialResult(
        crashed=True,
        error="ImportError: `keras.optimizers.legacy` is not supported in Keras 3",
        tf_version=version,
        extra={"versions": {"tensorflow": version, "keras": keras}, "keras": "keras"},
    )


def scripted(first_bad: str, untestable=(), calls=None):
    from tfrepro.trials.releases import version_key

    def trial(version: str, settings: TrialSettings):
        if calls is not None:
            calls.append(version)
        if version in untestable:
            return f"no environment for tensorflow-cpu {version}: install failed"
        return crash(version) if version_key(version) >= version_key(first_bad) else ok(version)

    return trial


VERSIONS = ["2.14.1", "2.15.1", "2.16.2", "2.17.1"]


def test_finds_first_bad_and_last_good_with_a_table(tmp_path):
    calls = []
    r = bisect_versions(project(tmp_path), VERSIONS, trial=scripted("2.16.2", calls=calls))
    assert (r["status"], r["symptom"]) == ("found", "crash")
    assert (r["last_good_version"], r["first_bad_version"]) == ("2.15.1", "2.16.2")
    assert calls == ["2.14.1", "2.17.1", "2.15.1", "2.16.2"]
    table = {row["version"]: row for row in r["versions"]}
    assert table["2.15.1"]["verdict"] == "ok" and table["2.16.2"]["verdict"] == "crash"
    assert "keras.optimizers.legacy" in table["2.16.2"]["note"]
    assert r["follows"] == "keras" and r["first_bad_commit"] is None
    assert json.loads((tmp_path / r["run_dir"] / "result.json").read_text())["first_bad_version"] == "2.16.2"


def test_an_untestable_release_is_skipped_with_its_reason(tmp_path):
    r = bisect_versions(project(tmp_path), VERSIONS, trial=scripted("2.17.1", untestable={"2.15.1"}))
    assert (r["first_bad_version"], r["last_good_version"]) == ("2.17.1", "2.16.2")
    row = next(x for x in r["versions"] if x["version"] == "2.15.1")
    assert row["verdict"] == "untestable" and "install failed" in row["note"]


def test_skips_that_hide_the_answer_give_candidates(tmp_path):
    r = bisect_versions(project(tmp_path), VERSIONS, trial=scripted("2.16.2", untestable={"2.15.1", "2.16.2"}))
    assert r["status"] == "ambiguous" and r["candidates"] == ["2.15.1", "2.16.2", "2.17.1"]
    assert r["first_bad_version"] is None and r["last_good_version"] == "2.14.1"


def test_good_and_bad_choose_the_ends_and_the_rest_is_not_tried(tmp_path):
    calls = []
    r = bisect_versions(
        project(tmp_path), VERSIONS, releases=vmode.Releases(good="2.15.1"), trial=scripted("2.16.2", calls=calls)
    )
    assert calls == ["2.15.1", "2.17.1", "2.16.2"] and r["good"] == "2.15.1"
    assert next(x for x in r["versions"] if x["version"] == "2.14.1")["verdict"] == "not tried"


def test_good_end_that_fails_and_bad_end_that_cannot_be_built(tmp_path):
    r = bisect_versions(project(tmp_path), VERSIONS, trial=scripted("2.14.1"))
    assert r["status"] == "baseline-fails" and "2.14.1 already shows crash" in r["message"]
    r = bisect_versions(project(tmp_path), VERSIONS, trial=scripted("2.16.2", untestable={"2.17.1"}))
    assert r["status"] == "error" and "install failed" in r["message"]


def test_newer_good_end_finds_the_release_that_fixed_it():
    assert order_range(VERSIONS, "2.17.1", "2.14.1") == ["2.17.1", "2.16.2", "2.15.1", "2.14.1"]
    with pytest.raises(UserError):
        order_range(VERSIONS, "2.15.1", "2.15.1")


def test_then_features_hook_gets_the_first_bad_release(tmp_path):
    seen = []
    r = bisect_versions(
        project(tmp_path),
        VERSIONS,
        trial=scripted("2.16.2"),
        releases=vmode.Releases(then_features=lambda start: seen.append(start) or {"status": "found"}),
    )
    assert seen[0].version == "2.16.2" and r["then_features"] == {"status": "found"}


def test_follows_tensorflow_when_keras_major_is_unchanged():
    rows = {
        "a": Row("a", "ok", keras="2.16.0", keras_lib="tf_keras"),
        "b": Row("b", "crash", keras="2.17.0", keras_lib="tf_keras"),
    }
    assert follows(rows, "a", "b")[0] == "tensorflow"
    rows["b"] = Row("b", "crash", keras="3.3.3", keras_lib="keras")
    assert follows(rows, "a", "b")[0] == "keras"


def test_bad_end_without_the_symptom_is_none_exit_3(tmp_path):
    r = bisect_versions(project(tmp_path), VERSIONS, trial=scripted("9.0"))
    assert r["status"] == "none" and "does not show" in r["message"]


def slower_from(first_bad: str, ratio: float, calls: list):
    """Releases from `first_bad` on take `ratio` times as long per step; a
    timing trial (a time budget) runs enough steady steps on a quiet machine."""
    from tfrepro.trials.releases import version_key

    def trial(version: str, settings: TrialSettings):
        calls.append((version, settings.repeat, settings.timing))
        step = 0.002 * (ratio if version_key(version) >= version_key(first_bad) else 1.0)
        n = settings.min_steps if settings.timing else 10
        return TrialResult(
            losses=(1.0,) * (3 + n),
            steps_run=3 + n,
            mode="fit",
            step_times=(0.5,) * 3 + (step,) * n,
            extra={"versions": {"tensorflow": version, "keras": "2.15.0"}, "others_cpu": 0.0},
        )

    return trial


def test_a_10x_slowdown_is_found_on_one_clear_pair_per_release_against_a_shared_pool(tmp_path):
    from tfrepro.trials.timing import TIMING_BASELINE, TIMING_CANDIDATE

    calls = []
    r = bisect_versions(project(tmp_path), VERSIONS, trial=slower_from("2.16.2", 10.0, calls))
    assert (r["status"], r["symptom"], r["first_bad_version"]) == ("found", "slowdown", "2.16.2")
    timed = [(v, rep) for v, rep, timing in calls if timing]
    # B C B C B ...: the good end's timing trials, each between two releases' timing trials
    assert timed[::2] == [("2.14.1", TIMING_BASELINE + k) for k in range(4)]
    assert timed[1::2] == [(v, TIMING_CANDIDATE) for v in ("2.17.1", "2.15.1", "2.16.2")]
    # one ordinary trial per tried release, one timing trial each, 4 of the good end's:
    # 11 (the unpaired test took 3 pairs each: 22)
    assert r["trials"] == len(calls) == 11
    assert r["timing"]["fast"] and len(r["timing"]["pairs"]) == 1


def test_a_vs_a_releases_are_not_slower(tmp_path):
    calls = []
    r = bisect_versions(
        project(tmp_path), VERSIONS, BisectOptions(symptom=Verdict.SLOWDOWN), trial=slower_from("9.0", 10.0, calls)
    )
    assert r["status"] == "none" and "does not show slowdown" in r["message"]
    assert [timing for _, _, timing in calls] == [False, False, True, True, True]


def test_the_then_features_runner_runs_in_the_release_and_takes_the_requests_options(monkeypatch, tmp_path):
    """`FeatureStart.runner` is called as an injected runner (the request's
    TrialOptions fields by name) and runs `run_trial` with one TrialOptions:
    the release's interpreter, versions and environment, the request's
    fields over them."""
    from tfrepro.trials import runner as trials_runner

    seen = []
    monkeypatch.setattr(trials_runner, "run_trial", lambda project, enabled, settings, how: seen.append(how))
    start = vmode.FeatureStart(tmp_path, "2.16.1", "/envs/tf216/bin/python", {"tensorflow": "2.16.1"}, {"A": "1"})
    start.runner()(None, (), TrialSettings(), TrialOptions(use_cache=False, label="then-features", env={"A": "2"}))
    (how,) = seen
    assert (how.python, dict(how.versions), dict(how.env)) == (
        "/envs/tf216/bin/python",
        {"tensorflow": "2.16.1"},
        {"A": "2"},
    )
    assert (how.use_cache, how.label) == (False, "then-features")


def test_a_good_end_killed_for_memory_fails_as_the_baseline_does_in_feature_mode(tmp_path):
    """One rule for both modes (bisect/ends.py BASELINE_FAILURES): an
    out-of-memory kill of the good end is no reference for any symptom."""

    def trial(version: str, settings: TrialSettings):
        if version == "2.14.1":
            return TrialResult(crashed=True, exit_code=-9, tf_version=version)
        return crash(version) if version == "2.17.1" else ok(version)

    r = bisect_versions(project(tmp_path), VERSIONS, trial=trial)
    assert r["status"] == "baseline-fails" and "2.14.1 already shows memory" in r["message"]
