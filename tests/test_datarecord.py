"""What the data is (inside/harness_data.py), on NumPy arrays (no TensorFlow)."""

from __future__ import annotations

import math

import numpy as np

from tfrepro.inside import harness_data as hd


def test_feature_stats_of_floats_with_nan_inf_and_zeros():
    s = hd.FeatureStats()
    s.update(np.array([0.0, 1.0, 3.0, np.nan, np.inf], dtype=np.float32))
    s.update(np.array([0.0], dtype=np.float32))
    d = s.to_dict()
    assert (d["count"], d["nan"], d["inf"]) == (6, 1, 1)
    assert (d["min"], d["max"], d["mean"]) == (0.0, 3.0, 1.0)
    assert d["zero_frac"] == 0.5 and math.isclose(d["std"], math.sqrt(1.5))
    assert d["distinct"] == [0.0, 1.0, 3.0]  # a float feature with few values (finite ones)
    many = hd.FeatureStats()
    many.update(np.linspace(0, 1, 100))
    assert "distinct" not in many.to_dict()


def test_distinct_values_of_integer_and_string_features_up_to_the_limit():
    few = hd.FeatureStats()
    few.update(np.array([3, 1, 3, 2]))
    assert few.to_dict()["distinct"] == [1, 2, 3]
    many = hd.FeatureStats()
    many.update(np.arange(hd.DISTINCT_MAX + 5))
    assert many.to_dict()["distinct"] is None
    words = hd.FeatureStats()
    words.update(np.array(["b", "a", "b"]))
    assert words.to_dict()["distinct"] == ["a", "b"]


def test_fit_on_arrays_records_spec_batches_and_per_column_stats():
    rec = hd.Recorder(lambda where: None)
    x = np.zeros((100, 2), dtype=np.float32)
    x[:, 1] = np.arange(100)
    y = np.arange(100) % 3
    rec.on_fit(None, (x, y), {"batch_size": 16})
    fit = rec.to_dict()["fits"][0]
    assert fit["kind"] == "arrays" and fit["records"] == 100 and fit["batches_per_epoch"] == 7
    assert fit["element_spec"]["x"] == {"shape": [100, 2], "dtype": "float32"}
    assert fit["features"]["x[:, 0]"]["zero_frac"] == 1.0
    assert fit["features"]["x[:, 1]"]["max"] == 99.0
    assert fit["features"]["y"]["distinct"] == [0, 1, 2]
    assert fit["at"] and fit["at"].endswith(".py:" + fit["at"].rsplit(":", 1)[1])


def test_batches_training_saw_give_the_stats_of_a_dataset():
    rec = hd.Recorder(lambda where: None)
    rec.fits.append({"kind": "tf.data"})
    for i in range(3):
        rec.see_batch({"0/a": np.full((4,), float(i)), "1": np.array([1, 0, 1, 1])})
    fit = rec.to_dict()["fits"][0]
    assert fit["features"]["x['a']"]["mean"] == 1.0
    assert fit["features"]["y"]["distinct"] == [0, 1]
    assert fit["stats_from"] == "the first 3 batches training saw"


def test_a_fit_on_arrays_and_the_batches_training_saw_name_the_features_alike():
    """One walk, one name per leaf: a list input's leaves are x[0], x[1]
    whether fit got the arrays or training saw them as a batch (the train
    step's outputs, keyed "0/1"; they were x['1'])."""
    a, b = np.arange(8.0), np.ones(8)
    arrays = hd.Recorder(lambda where: None)
    arrays.on_fit(None, ([a, {"k": b}], a), {})
    seen = hd.Recorder(lambda where: None)
    seen.fits.append({"kind": "tf.data"})
    seen.see_batch({"0/0": a, "0/1/k": b, "1": a})
    names = {"x[0]", "x[1]['k']", "y"}
    assert set(arrays.to_dict()["fits"][0]["features"]) == set(seen.to_dict()["fits"][0]["features"]) == names
    assert list(hd.batch_outputs(([a, {"k": b, "j": None}], a))) == ["0/0", "0/1/k", "1"]  # batch.npz's names


def test_a_source_is_named_with_the_callers_file_and_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rec = hd.Recorder(lambda where: None)
    rec.source("numpy.load", tmp_path / "x.npy", np.zeros((5, 2)))
    got = rec.to_dict()["sources"][0]
    assert got["call"] == "numpy.load" and got["file"] == "x.npy" and got["shape"] == [5, 2]
    assert got["at"].rsplit(":", 1)[0].endswith("test_datarecord.py")
