"""TensorBoard HParams summaries in pure Python (the `tensorboard` package and
its `plugins.hparams` protos are not needed).

One trial is one HParams *session*: its run directory holds a
`_hparams_/session_start_info` summary (the features as boolean hparams, the
trial's label as a string) and scalar metrics. With no experiment summary,
TensorBoard's HParams dashboard infers the experiment (hparam domains, metric
names) from the sessions it finds. Field numbers follow
`tensorboard/plugins/hparams/plugin_data.proto`, `google/protobuf/struct.proto`
and TensorFlow's `summary.proto` / `tensor.proto`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from tfrepro.report.events import _field_bytes, _fields, _varint

PLUGIN_NAME = "hparams"
SESSION_START_INFO_TAG = "_hparams_/session_start_info"
# A scalar float 0.0 (DT_FLOAT = 1, shape []): TensorBoard keeps a summary
# value only when it carries a tensor; the plugin reads the metadata.
_NULL_TENSOR = _varint(1 << 3 | 0) + _varint(1) + _field_bytes(2, b"") + _field_bytes(5, struct.pack("<f", 0.0))


def _value(v: bool | int | float | str) -> bytes:
    """google.protobuf.Value: number_value = 2, string_value = 3, bool_value = 4."""
    if isinstance(v, bool):
        return _varint(4 << 3 | 0) + _varint(int(v))
    if isinstance(v, (int, float)):
        return _varint(2 << 3 | 1) + struct.pack("<d", float(v))
    return _field_bytes(3, str(v).encode())


def session_start_value(
    hparams: Mapping[str, bool | int | float | str], *, group_name: str = "", start_time_secs: float = 0.0
) -> bytes:
    """A `Summary.Value` holding HParamsPluginData{session_start_info}."""
    info = b"".join(
        _field_bytes(1, _field_bytes(1, k.encode()) + _field_bytes(2, _value(v))) for k, v in hparams.items()
    )  # map<string, Value> hparams = 1
    if group_name:
        info += _field_bytes(4, group_name.encode())
    if start_time_secs:
        info += _varint(5 << 3 | 1) + struct.pack("<d", start_time_secs)
    plugin_data = _field_bytes(3, info)  # HParamsPluginData: version 0 (omitted), session_start_info = 3
    metadata = _field_bytes(1, _field_bytes(1, PLUGIN_NAME.encode()) + _field_bytes(2, plugin_data))
    return _field_bytes(1, SESSION_START_INFO_TAG.encode()) + _field_bytes(9, metadata) + _field_bytes(8, _NULL_TENSOR)


def read_session_start(value: bytes) -> dict[str, bool | float | str]:
    """The hparams of a `session_start_value` (for tests)."""
    out: dict[str, bool | float | str] = {}
    meta = next(v for n, v in _fields(value) if n == 9)
    plugin = next(v for n, v in _fields(meta) if n == 1)
    assert next(v for n, v in _fields(plugin) if n == 1) == PLUGIN_NAME.encode()
    info = next(v for n, v in _fields(next(v for n, v in _fields(plugin) if n == 2)) if n == 3)
    for num, entry in _fields(info):
        if num != 1:
            continue
        parts = dict(_fields(entry))
        kind, raw = next(iter(_fields(parts[2])))
        out[parts[1].decode()] = bool(raw) if kind == 4 else struct.unpack("<d", raw)[0] if kind == 2 else raw.decode()
    return out
