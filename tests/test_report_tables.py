"""trials.csv and the TensorBoard HParams view written into every run dir."""

from __future__ import annotations

import csv
import json
import math
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitrepo import GitRepo, isolated_git_env

from tfrepro.cli import main
from tfrepro.report import events, hparams
from tfrepro.report.tables import write_trial_tables

STEPS = [0.5, 0.01, 0.002, 0.004, 0.003]


def _fake_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    rows = []
    for i, (enabled, role, verdict, losses) in enumerate(
        [
            ([], "baseline", "ok", [1.0, 0.5, 0.25, 0.125, 0.0625]),
            (["amp", "xla"], "failing", "nan", [1.0, None]),
            (["xla"], "search", "ok", [1.0, 0.5, 0.25, 0.125, 0.0625]),
        ],
        1,
    ):
        d = run / "trials" / f"{i:03d}"
        d.mkdir(parents=True)
        s = {
            "label": role,
            "losses": losses,
            "step_times": STEPS[: len(losses)],
            "steps_run": len(losses),
            "first_nonfinite_step": 2 if None in losses else None,
            "wall_s": 1.5,
            "cached": False,
            "median_step_time": 0.003 if len(losses) > 2 else None,
        }
        (d / "summary.json").write_text(json.dumps(s))
        rows.append(
            {
                "enabled": enabled,
                "verdict": verdict,
                "summary": f"trials/{i:03d}/summary.json",
                "cached": i == 3,
                "role": role,
                "repeat": 0,
            }
        )
    (run / "result.json").write_text(json.dumps({"status": "found", "features": ["amp", "xla"], "trials_table": rows}))
    return run


def test_trials_csv_one_row_per_trial(tmp_path):
    run = _fake_run(tmp_path)
    written = write_trial_tables(run)
    assert written == {"trials.csv": run / "trials.csv", "tensorboard": run / "tensorboard"}
    assert (run / "trials.csv").read_text().splitlines() == [
        "index,role,repeat,label,features_on,verdict,steps,first_loss,last_loss,first_nonfinite_step,"
        "median_step_ms,wall_s,cached",
        "1,baseline,0,,,ok,5,1,0.0625,,3,1.5,False",
        "2,failing,0,,amp;xla,nan,2,1,nan,2,,1.5,False",
        "3,search,0,,xla,ok,5,1,0.0625,,3,1.5,True",
    ]


def _records(path: Path) -> list[bytes]:
    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos : pos + 8])
        out.append(data[pos + 12 : pos + 12 + n])
        pos += 16 + n
    return out


def _session_value(path: Path) -> bytes:
    for body in _records(path):
        for num, summary in events._fields(body):
            if num == 5:
                value = next(v for n, v in events._fields(summary) if n == 1)
                if hparams.SESSION_START_INFO_TAG.encode() in value:
                    return value
    raise AssertionError("no session start info")


def test_hparams_sessions_features_as_booleans_and_metrics(tmp_path):
    run = _fake_run(tmp_path)
    write_trial_tables(run)
    assert sorted(p.name for p in (run / "tensorboard").iterdir()) == ["001_baseline", "002_failing", "003_search"]
    path = run / "tensorboard" / "002_failing" / events.EVENT_FILE
    assert hparams.read_session_start(_session_value(path)) == {
        "amp": True,
        "xla": True,
        "role": "failing",
        "verdict": "nan",
    }
    scalars = events.read_scalars(path)  # every CRC checked
    assert scalars["shows_symptom"] == [(2, 1.0)] and math.isnan(scalars["final_loss"][0][1])
    assert [s for s, _ in scalars["loss"]] == [1, 2]
    base = events.read_scalars(run / "tensorboard" / "001_baseline" / events.EVENT_FILE)
    assert base["shows_symptom"] == [(5, 0.0)] and base["median_step_ms"] == [(5, pytest.approx(3.0))]


def test_session_start_info_parses_with_protobuf(tmp_path):
    """The hand-written bytes against the real schema (plugin_data.proto),
    built at run time: the tensorboard package is not needed."""
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    from google.protobuf import descriptor_pool, message_factory, struct_pb2

    f = descriptor_pb2.FileDescriptorProto(
        name="hp.proto", package="hp", syntax="proto3", dependency=["google/protobuf/struct.proto"]
    )
    m = f.message_type.add(name="SessionStartInfo")
    e = m.nested_type.add(name="HparamsEntry")
    e.options.map_entry = True
    e.field.add(name="key", number=1, type=9, label=1)
    e.field.add(name="value", number=2, type=11, label=1, type_name=".google.protobuf.Value")
    m.field.add(name="hparams", number=1, type=11, label=3, type_name=".hp.SessionStartInfo.HparamsEntry")
    m.field.add(name="start_time_secs", number=5, type=1, label=1)
    d = f.message_type.add(name="HParamsPluginData")
    d.field.add(name="version", number=1, type=5, label=1)
    d.field.add(name="session_start_info", number=3, type=11, label=1, type_name=".hp.SessionStartInfo")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(struct_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(f)
    plugin_data = message_factory.GetMessageClass(pool.FindMessageTypeByName("hp.HParamsPluginData"))
    value = hparams.session_start_value({"amp": True, "verdict": "nan", "lr": 0.5}, start_time_secs=12.5)
    meta = next(v for n, v in events._fields(value) if n == 9)
    plugin = next(v for n, v in events._fields(meta) if n == 1)
    msg = plugin_data.FromString(next(v for n, v in events._fields(plugin) if n == 2))
    info = msg.session_start_info
    assert info.hparams["amp"].bool_value is True and info.hparams["verdict"].string_value == "nan"
    assert info.hparams["lr"].number_value == 0.5 and info.start_time_secs == 12.5


FEATURE_LOOP = """loss = 1.0
scale = 1.0
# tfrepro: feature blowup -- the loss goes to NaN
# scale = float("nan")
# tfrepro: end
# tfrepro: feature other -- harmless
# x = 1
# tfrepro: end
for step in range(1, 6):
    loss *= 0.9
    print(f"step={step} loss={loss * scale}", flush=True)
"""


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_feature_bisect_writes_trials_csv_and_hparams(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "repro.py").write_text(FEATURE_LOOP)
    r = CliRunner().invoke(main, ["bisect", str(tmp_path / "p"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = _csv(Path(doc["run_dir"]) / "trials.csv")
    assert len(rows) == doc["trials"] and rows[0]["role"] == "baseline"
    assert {row["verdict"] for row in rows if row["features_on"] == "blowup"} == {"nan"}
    assert "trials: " in r.stderr and "tensorboard --logdir" in r.stderr
    assert len(list((Path(doc["run_dir"]) / "tensorboard").iterdir())) == doc["trials"]


def test_commit_bisect_writes_trials_csv_labelled_by_commit(tmp_path, monkeypatch):
    isolated_git_env(tmp_path / "home", monkeypatch)
    repo = GitRepo.init(tmp_path / "repo", tmp_path / "home")
    good = repo.commit("ok", {"repro.py": FEATURE_LOOP})
    bad = repo.commit("nan", {"repro.py": FEATURE_LOOP.replace('# scale = float("nan")', 'scale = float("nan")')})
    r = CliRunner().invoke(main, ["bisect", str(repo.root), "--good", good, "--bad", bad, "--json"])
    assert r.exit_code == 0, r.output
    rows = _csv(Path(json.loads(r.stdout)["run_dir"]) / "trials.csv")
    assert {(row["label"], row["verdict"]) for row in rows} >= {(good, "ok"), (bad, "nan")}
