"""TensorBoard event files in pure Python (no TensorFlow, no tensorboard).

An event file is a TFRecord stream of `Event` protocol buffers; a scalar is a
`Summary.Value` with `simple_value`, which TensorBoard's scalars dashboard
reads. The few fields needed are encoded by hand, so the report can write one
run per trial without starting TensorFlow.

    record = uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Sequence
from pathlib import Path


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 as protobuf writes it
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(
    wall_time: float, step: int, *, file_version: str | None = None, tag: str | None = None, value: float | None = None
) -> bytes:
    msg = _varint(1 << 3 | 1) + struct.pack("<d", wall_time)  # wall_time: double
    msg += _varint(2 << 3 | 0) + _varint(step)  # step: int64
    if file_version is not None:
        msg += _field_bytes(3, file_version.encode())
    if tag is not None and value is not None:
        msg += _field_bytes(
            5, _field_bytes(1, scalar_value(tag, value))
        )  # Event.summary = 5, Summary.value = 1  # Event.summary = 5, Summary.value = 1
    return msg


def _record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


# TensorBoard reads any file whose name holds "tfevents"; the usual name
# carries the host name and process id, which a bundle meant for a public
# tracker must not (one run per directory: one fixed name is enough).
EVENT_FILE = "events.out.tfevents.tfrepro"


def scalar_value(tag: str, value: float) -> bytes:
    """Summary.Value{tag = 1, simple_value = 2 (float32)}."""
    return _field_bytes(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value)


def value_event(wall_time: float, step: int, value: bytes) -> bytes:
    """An Event holding one ready-made `Summary.Value` (e.g. an HParams one)."""
    msg = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3 | 0) + _varint(step)
    return msg + _field_bytes(5, _field_bytes(1, value))


def write_run(
    logdir: Path,
    scalars: dict[str, Sequence[float | None]],
    *,
    wall_time: float | None = None,
    values: Sequence[tuple[int, bytes]] = (),
) -> Path:
    """One event file in `logdir` holding each series as scalars at steps
    1, 2, ...; None (a non-finite loss in result.json) is written as NaN,
    which TensorBoard shows at the step it happened. `values`: (step,
    Summary.Value bytes) written after them (HParams session info, metrics)."""
    logdir.mkdir(parents=True, exist_ok=True)
    t = time.time() if wall_time is None else wall_time
    path = logdir / EVENT_FILE
    with open(path, "wb") as f:
        f.write(_record(_event(t, 0, file_version="brain.Event:2")))
        for tag, series in scalars.items():
            for i, v in enumerate(series, 1):
                x = math.nan if v is None else float(v)
                f.write(_record(_event(t, i, tag=tag, value=x)))
        for step, value in values:
            f.write(_record(value_event(t, step, value)))
    return path


def read_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Read back what `write_run` writes (checks every CRC); for tests."""
    data = path.read_bytes()
    out: dict[str, list[tuple[int, float]]] = {}
    pos = 0
    while pos < len(data):
        header = data[pos : pos + 8]
        (n,) = struct.unpack("<Q", header)
        if struct.unpack("<I", data[pos + 8 : pos + 12])[0] != masked_crc(header):
            raise ValueError("bad length CRC")
        body = data[pos + 12 : pos + 12 + n]
        if struct.unpack("<I", data[pos + 12 + n : pos + 16 + n])[0] != masked_crc(body):
            raise ValueError("bad data CRC")
        pos += 16 + n
        step, tag, value = _parse_event(body)
        if tag is not None and value is not None:
            out.setdefault(tag, []).append((step, value))
    return out


def _read_varint(b: bytes, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return n, i


def _fields(b: bytes):
    i = 0
    while i < len(b):
        key, i = _read_varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _read_varint(b, i)
        elif wire == 1:
            v, i = b[i : i + 8], i + 8
        elif wire == 5:
            v, i = b[i : i + 4], i + 4
        elif wire == 2:
            n, i = _read_varint(b, i)
            v, i = b[i : i + n], i + n
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield num, v


def _parse_event(body: bytes) -> tuple[int, str | None, float | None]:
    step, tag, value = 0, None, None
    for num, v in _fields(body):
        if num == 2:
            step = v
        elif num == 5:
            for snum, sv in _fields(v):
                if snum == 1:
                    for vnum, vv in _fields(sv):
                        if vnum == 1:
                            tag = vv.decode()
                        elif vnum == 2:
                            value = struct.unpack("<f", vv)[0]
    return step, tag, value
