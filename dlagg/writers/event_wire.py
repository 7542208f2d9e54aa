"""TensorBoard's scalar events in protobuf's wire format, put together by numpy.

An iteration's ``Event`` (wall_time, step, summary) holds a ``Summary.Value`` per defined scalar: its tag, a
float32 tensor (``TensorProto``: dtype DT_FLOAT, an empty shape, one packed float) and, on a tag's first value of a
run, the scalars plugin's metadata (as TensorFlow's writers do). These are the bytes ``SerializeToString`` gives
for the protos that tensorboard's ``scalar_pb`` makes (tests/test_tfrecord.py compares the two). Building a proto per
value is slow, and a many-ranks job has many values (hundreds of thousands at 1,024 ranks), written in the
TensorBoard job, the last job of the run. Here every value but a tag's first is its tag's bytes with the value's
four bytes put in, a row at a time, several times faster than building protos.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

FLOAT_TENSOR = b"\x08\x01\x12\x00\x2a\x04"  # dtype DT_FLOAT, tensor_shape {}, float_val packed: its 4 bytes follow


SMALL = [bytes((n,)) for n in range(128)]  # the varints of one byte


def varint(n: int) -> bytes:
    """A varint (an int64 below zero as its 64-bit two's complement, as protobuf writes it)."""
    if 0 <= n < 128:
        return SMALL[n]
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: a string or a message."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _entry(tag: bytes, metadata: bytes = b"") -> tuple[bytes, bytes]:
    """A Summary's value field of one float under `tag`, as (the bytes before the float, the bytes after it):
    ``Value`` fields in protobuf's order, tag (1), tensor (8), metadata (9, when given)."""
    tail = field(9, metadata) if metadata else b""
    named = field(1, tag) + varint(8 << 3 | 2) + varint(len(FLOAT_TENSOR) + 4) + FLOAT_TENSOR
    return varint(1 << 3 | 2) + varint(len(named) + 4 + len(tail)) + named, tail


def scalar_events(steps: Sequence[int], tags: Sequence[str], values: np.ndarray, metadata: Sequence[bytes],
                  wall_time: float) -> list[bytes]:
    """The serialized ``Event`` of each row of `values` (a row per step, a column per tag; NaN: undefined in that
    step): its defined values in column order, column j's first one with `metadata[j]` (serialized)."""
    values = np.ascontiguousarray(values, dtype="<f4").reshape(len(steps), len(tags))
    defined = ~np.isnan(values)
    first = defined & (np.cumsum(defined, axis=0) == 1)
    plain = [_entry(tag.encode())[0] for tag in tags]
    # Every column's value field side by side, its float's bytes at `at`; a row keeps its defined columns' bytes.
    sizes = np.array([len(head) + 4 for head in plain], dtype=np.int64)
    template = np.frombuffer(b"".join(head + bytes(4) for head in plain), dtype=np.uint8)
    at = ((np.cumsum(sizes) - 4)[:, None] + np.arange(4)).ravel()
    column_of = np.repeat(np.arange(len(tags)), sizes)
    floats = values.view(np.uint8).reshape(len(steps), 4 * len(tags))
    wall = struct.pack("<d", wall_time)
    head = b"\x09" + wall if wall != bytes(8) else b""  # proto3 leaves zeros out
    events = []
    for i, step in enumerate(steps):  # one event per step (iteration)
        if first[i].any():  # a run's first values: with their tags' metadata
            parts = []
            for j in np.flatnonzero(defined[i]).tolist():  # tags of this step
                before, after = _entry(tags[j].encode(), metadata[j]) if first[i, j] else (plain[j], b"")
                parts += [before, floats[i, 4 * j:4 * j + 4].tobytes(), after]
            summary = b"".join(parts)
        else:
            row = template.copy()
            row[at] = floats[i]
            summary = row[defined[i][column_of]].tobytes()
        events.append(head + (b"\x10" + varint(int(step)) if step else b"") + field(5, summary))
    return events
