"""TFRecord framing of TensorBoard event files, with a CRC-32C computed by numpy.

A record is ``length (uint64 LE) | masked CRC-32C of length (uint32 LE) | data | masked CRC-32C of data``,
as tensorboard's ``RecordWriter`` writes it. tensorboard's own CRC-32C (its TensorFlow stub) is a Python
loop over bytes, slow enough to be most of the time of writing a many-ranks job's event files. Here
the records of a file are cut into chunks of CHUNK bytes, every chunk's CRC register is advanced by one
numpy step per byte position (all chunks at once), and a record's chunks are then chained with a table
of the register's advance over CHUNK zero bytes (a CRC is linear over GF(2)).

Two facts of the reflected CRC make the chunks independent: from a zero register, zero bytes leave it
zero (so a record is padded in front to whole chunks), and the initial register 0xFFFFFFFF is the same
as a zero register over the record with its first four bytes inverted.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

POLYNOMIAL = 0x82F63B78  # Castagnoli, reflected
CHUNK = 128  # bytes per chunk: numpy steps per file; the records are padded to whole chunks
MASK_DELTA = 0xA282EAD8


def _byte_table() -> np.ndarray:
    """The register after one byte b from a register holding b alone (the usual CRC table), for b in 0..255."""
    register = np.arange(256, dtype=np.uint32)
    for _ in range(8):  # bits of a byte
        register = np.where(register & 1, (register >> 1) ^ np.uint32(POLYNOMIAL), register >> 1).astype(np.uint32)
    return register


TABLE = _byte_table()


def _advance(register: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Registers (one per row of `data`) after that row's bytes, a numpy step per column."""
    for column in range(data.shape[1]):  # byte positions of a chunk, not bytes
        register = TABLE[(register ^ data[:, column]) & 0xFF] ^ (register >> 8)
    return register


def _zeros_tables() -> list[list[int]]:
    """Four tables that advance a register over CHUNK zero bytes (linear: the XOR of its four bytes' advances)."""
    single = np.arange(256, dtype=np.uint32)
    shifted = [_advance(single << np.uint32(8 * k), np.zeros((256, CHUNK), dtype=np.uint32)) for k in range(4)]
    return [table.tolist() for table in shifted]


ZEROS = _zeros_tables()


def crc32c(records: Sequence[bytes]) -> list[int]:
    """The CRC-32C of each record."""
    lengths = np.array([len(r) for r in records], dtype=np.int64)
    chunks = -(-(lengths + 4 * (lengths < 4)) // CHUNK)  # a record shorter than 4 bytes: one chunk all the same
    data = np.zeros(int(chunks.sum()) * CHUNK, dtype=np.uint8)
    ends = np.cumsum(chunks) * CHUNK
    for record, end in zip(records, ends.tolist(), strict=True):  # records of one file, not events
        data[end - len(record):end] = np.frombuffer(record, dtype=np.uint8)
    starts = ends - lengths  # first byte of each record; the initial register: its first 4 bytes inverted
    short = lengths < 4
    for k in range(4):  # bytes of the initial register
        data[starts[~short] + k] ^= 0xFF
    registers = _advance(np.zeros(len(data) // CHUNK, dtype=np.uint32),
                         data.reshape(-1, CHUNK).astype(np.uint32)).tolist()
    z0, z1, z2, z3 = ZEROS
    out = []
    first = 0
    for count in chunks.tolist():  # records; then their chunks (CHUNK bytes each)
        register = 0
        for chunk in registers[first:first + count]:
            register = z0[register & 0xFF] ^ z1[(register >> 8) & 0xFF] ^ z2[(register >> 16) & 0xFF] ^ \
                z3[register >> 24] ^ chunk
        out.append(register)
        first += count
    for k in np.flatnonzero(short).tolist():  # fewer than 4 bytes: the plain loop
        register = 0xFFFFFFFF
        for byte in records[k]:
            register = int(TABLE[(register ^ byte) & 0xFF]) ^ (register >> 8)
        out[k] = register
    return [register ^ 0xFFFFFFFF for register in out]


def masked(crc: int) -> int:
    """TFRecord's masked CRC (a CRC of data holding CRCs is then not trivially related to them)."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def framed(files: Sequence[Sequence[bytes]]) -> list[bytes]:
    """Each file's records in TFRecord framing, in order: the file's bytes. The CRCs of every file's records are
    computed at once (a many-ranks job writes a file per rank: one numpy pass, not one per file)."""
    headers = [[struct.pack("<Q", len(r)) for r in records] for records in files]
    crcs = crc32c([part for file_headers, records in zip(headers, files, strict=True)
                   for part in (*file_headers, *records)])  # per file: its headers', then its records'
    out, at = [], 0
    for file_headers, records in zip(headers, files, strict=True):  # files
        count = len(records)
        header_crcs, record_crcs = crcs[at:at + count], crcs[at + count:at + 2 * count]
        at += 2 * count
        parts = []
        for header, header_crc, record, record_crc in zip(file_headers, header_crcs, records, record_crcs,
                                                          strict=True):  # records of one file
            parts += [header, struct.pack("<I", masked(header_crc)), record, struct.pack("<I", masked(record_crc))]
        out.append(b"".join(parts))
    return out
