"""The TFRecord framing of event files: the bytes tensorboard's own RecordWriter writes, CRC-32C included; and the
scalar events inside them: the bytes of the protos tensorboard's scalar summary makes."""

from __future__ import annotations

import io
import random

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as tensorboard_crc32c
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.scalar.summary_v2 import scalar_pb
from tensorboard.summary.writer.record_writer import RecordWriter

from dlagg.writers.event_wire import scalar_events
from dlagg.writers.tfrecord import CHUNK, crc32c, framed


def test_crc32c_check_value() -> None:
    assert crc32c([b"123456789"]) == [0xE3069283]  # the Castagnoli CRC's published check value
    assert crc32c([b""]) == [0]


def test_crc32c_equals_tensorboards_at_every_length_around_the_chunks() -> None:
    rng = random.Random(7)
    lengths = [*range(0, 9), *(k * CHUNK + d for k in (1, 2, 5) for d in (-5, -4, -3, -1, 0, 1, 3, 4)), 100_003]
    records = [rng.randbytes(n) for n in lengths] + [bytes(n) for n in (1, 4, CHUNK, 3 * CHUNK + 2)]  # zeros too
    records += [b"\xff" * n for n in (1, 3, 4, 5, CHUNK + 1)]
    assert crc32c(records) == [tensorboard_crc32c(r) for r in records]


def test_files_are_framed_as_tensorboard_frames_them() -> None:
    rng = random.Random(11)
    files = [[rng.randbytes(rng.randrange(0, 3 * CHUNK)) for _ in range(200)] + [rng.randbytes(70_000), b""],
             [], [b""], [rng.randbytes(n) for n in (1, 5, CHUNK, 2 * CHUNK + 3)]]  # framed together, each its own
    theirs = []
    for records in files:
        out = io.BytesIO()
        writer = RecordWriter(out)
        for record in records:
            writer.write(record)
        theirs.append(out.getvalue())
    assert framed(files) == theirs


def protobuf_events(steps, tags, values, descriptions, wall_time) -> list[bytes]:
    """The events as tensorboard makes them: a scalar summary (``scalar_pb``) per defined value, with the plugin's
    metadata (and its description) on a tag's first value only, as TensorFlow's writers keep it."""
    events, described = [], set()
    for step, row in zip(steps, values, strict=True):
        summary = summary_pb2.Summary()
        for tag, value, description in zip(tags, row.tolist(), descriptions, strict=True):
            if np.isnan(value):
                continue
            made = scalar_pb(tag, np.float32(value), description=description).value[0]
            if tag in described:
                made.ClearField("metadata")
            described.add(tag)
            summary.value.append(made)
        events.append(event_pb2.Event(wall_time=wall_time, step=step, summary=summary).SerializeToString())
    return events


def test_scalar_events_are_the_bytes_of_tensorboards_scalar_protos() -> None:
    """Random runs: NaN cells (a whole row, a whole column, a tag first defined late), steps 0, large and below
    zero, floats of every kind, tags of one byte to over 127 (two-byte lengths) and not ASCII, no tag at all."""
    rng = np.random.default_rng(5)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38, -1.5, 2.0 ** 70], dtype=np.float32)
    for rows, columns in ((1, 1), (12, 40), (7, 3), (3, 0), (0, 4), (30, 12)):
        values = rng.standard_normal((rows, columns)).astype(np.float32) * 10.0 ** rng.integers(-8, 9, (rows, columns))
        values[rng.random((rows, columns)) < 0.2] = np.nan
        values[rng.random((rows, columns)) < 0.1] = rng.choice(specials, 1)[0]
        if rows > 2 and columns > 2:
            values[0, :] = np.nan  # an event with no value
            values[:, 1] = np.nan  # a tag with none
            values[: rows - 1, 2] = np.nan  # a tag first defined in the last step
        steps = [0, *rng.integers(-5, 2 ** 40, max(rows - 1, 0)).tolist()][:rows]
        tags = [str(rng.choice(["a", "rank3/GPU Idle (ms)", "é/" + "x" * 150, "t" * 127])) + f"/{k}"
                for k in range(columns)]
        descriptions = [f"described {k}" if k % 3 else "" for k in range(columns)]
        metadata = [scalar_metadata.create_summary_metadata(display_name=None, description=d).SerializeToString()
                    for d in descriptions]
        wall_time = float(rng.uniform(1e9, 2e9))
        assert scalar_events(steps, tags, values, metadata, wall_time) == protobuf_events(
            steps, tags, values, descriptions, wall_time)
