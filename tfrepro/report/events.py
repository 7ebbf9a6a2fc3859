"""TensorBoard event files, written with tensorboardX (no TensorFlow).

One run directory holds one event file: each series as `simple_value`
scalars at steps 1, 2, ... (TensorBoard's scalars dashboard), optionally an
HParams session (the HParams dashboard: one session per trial, its hparams
and metrics). tensorboardX supplies the protocol buffers, the HParams plugin
data and the TFRecord framing; it is imported only when a file is written.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# TensorBoard reads any file whose name holds "tfevents"; the usual name
# carries the host name and process id, which a bundle meant for a public
# tracker must not (one run per directory: one fixed name is enough).
EVENT_FILE = "events.out.tfevents.tfrepro"

HParams = Mapping[str, bool | int | float | str]


def write_run(
    logdir: Path,
    scalars: Mapping[str, Sequence[float | None]],
    *,
    wall_time: float | None = None,
    hparams: HParams | None = None,
    metrics: Mapping[str, tuple[int, float]] | None = None,
) -> Path:
    """One event file in `logdir` holding each series as scalars at steps
    1, 2, ...; None (a non-finite loss in result.json) is written as NaN,
    which TensorBoard shows at the step it happened. `hparams`: this run is
    one HParams session with those values; `metrics`: tag -> (step, value),
    the session's metrics (written as scalars, as the HParams plugin reads them)."""
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    from tensorboardX.proto.summary_pb2 import Summary
    from tensorboardX.record_writer import RecordWriter
    from tensorboardX.summary import hparams as hparams_summaries

    def scalar(tag: str, v: float) -> Summary:  # not summary.scalar: it warns on NaN, which we mean
        return Summary(value=[Summary.Value(tag=tag, simple_value=v)])

    logdir.mkdir(parents=True, exist_ok=True)
    t = time.time() if wall_time is None else wall_time
    path = logdir / EVENT_FILE
    writer = RecordWriter(str(path))
    try:
        writer.write(Event(wall_time=t, step=0, file_version="brain.Event:2").SerializeToString())

        def put(step: int, summary) -> None:
            writer.write(Event(wall_time=t, step=step, summary=summary).SerializeToString())

        if hparams is not None:
            # The session start only: TensorBoard infers the experiment
            # (hparam domains, metric names) from the sessions it finds.
            _, start, _ = hparams_summaries(dict(hparams), dict(metrics or {}))
            plugin = start.value[0].metadata.plugin_data
            data = HParamsPluginData.FromString(plugin.content)
            data.session_start_info.start_time_secs = t
            plugin.content = data.SerializeToString()
            put(0, start)
        for tag, series in scalars.items():
            for i, v in enumerate(series, 1):
                put(i, scalar(tag, math.nan if v is None else float(v)))
        for tag, (step, v) in (metrics or {}).items():
            put(step, scalar(tag, v))
    finally:
        writer.close()
    return path


def safe_name(name: str, limit: int) -> str:
    """`name` as a run directory's name: only letters, digits and `+-_.`, at most `limit` characters."""
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in name)[:limit]
