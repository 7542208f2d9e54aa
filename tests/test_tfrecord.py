"""The TFRecord framing of event files: the bytes tensorboard's own RecordWriter writes, CRC-32C included."""

from __future__ import annotations

import io
import random

from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as tensorboard_crc32c
from tensorboard.summary.writer.record_writer import RecordWriter

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
