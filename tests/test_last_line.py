"""The crash message is the last line the script wrote, not one of
TensorFlow's own C++ log lines printed after it (a trial that crashes on
import: the cuInit line was quoted as the error)."""

from __future__ import annotations

from tfrepro.trials.runner import last_line

TRACEBACK_THEN_TF_LOG = """\
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    import tensorflow_addons
ModuleNotFoundError: No module named 'tensorflow_addons'
E0000 00:00:1796182820.100479    1948 cuda_executor.cc:1228] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
2026-12-02 03:00:00.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR

"""


def test_tensorflows_log_lines_are_not_the_crash_message(tmp_path):
    log = tmp_path / "stderr.txt"
    log.write_text(TRACEBACK_THEN_TF_LOG)
    assert last_line(log) == "ModuleNotFoundError: No module named 'tensorflow_addons'"


def test_only_log_lines_still_give_the_last_one(tmp_path):
    log = tmp_path / "stderr.txt"
    log.write_text(TRACEBACK_THEN_TF_LOG.split("ModuleNotFoundError")[1].split("\n", 1)[1])
    assert last_line(log).startswith("WARNING: All log messages")
    (tmp_path / "empty.txt").write_text("\n\n")
    assert last_line(tmp_path / "empty.txt") is None
