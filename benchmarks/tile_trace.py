"""Make an N-times longer PyTorch profiler (Kineto) trace by tiling a real one in time, for the speed benchmark.

Contract: ``tile(source, target, copies) -> TileStats``. ``source`` is a Kineto trace (``*.pt.trace.json`` or
``.json.gz``), only read. ``target`` is a new trace (gzip when its name ends in ``.gz``) whose ``traceEvents`` hold
the source's events plus ``copies - 1`` shifted copies; every other top-level key (``deviceProperties``,
``distributedInfo``, ``baseTimeNanoseconds``, ``schemaVersion`` ...) is kept byte for byte, in the same order
(readers grep the header: HTA finds a trace's rank with the regex ``"rank":\\s+(\\d+)`` and otherwise reads the
whole file line by line before it gives up).

Copy k of an event (k = 1 .. copies-1) is the event with
- ``ts`` moved by ``k * shift``, where ``shift`` is the copied events' span (first ``ts`` to last ``ts + dur``)
  plus a 1 ms gap, so copies follow one another without overlapping;
- the ``correlation``, ``External id``, ``Python id`` and ``Python parent id`` args and the flow events' ``id``
  moved by ``k * (max id + 1)`` (one max over all of them, so an ``ac2g`` flow id still equals its correlation id):
  every join (kernel -> runtime call, GPU op -> CPU op, flow start -> finish) stays one to one and within its copy;
- ``ProfilerStep#N`` renamed ``ProfilerStep#(N + k * steps)``, so step numbers keep increasing across copies
  (#3..#12, then #13..#22, ...);
- everything else unchanged (pids, tids, streams, shapes, the other args).
Metadata events (``"ph": "M"``), instant events (``"ph": "i"``) and the profiler's ``Trace`` span are written once,
not copied: the span is lengthened to cover all copies, and instants at or after the end of the source's events
(``Record Window End``) move to the end of the last copy. They follow all copies, where Kineto writes them too.

Times are integer nanoseconds inside and written as microseconds with exactly three decimals, as Kineto writes
them: every number is decoded from its text (never through a binary float), so nothing is rounded. Floats other
than ``ts`` (``dur``, occupancy ...) are copied verbatim. Events are written compact, one per line, streamed one
copy at a time; memory is that of the decoded source.

``check(target, source, copies)`` re-reads a tiled trace and asserts the above (valid JSON, event count, step
numbers, ``ts`` written with three decimals, ids distinct across copies); ``--check`` runs it after tiling.

    python benchmarks/tile_trace.py SOURCE.pt.trace.json.gz TARGET.pt.trace.json.gz --copies 15 [--check]
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import msgspec

GAP_NS = 1_000_000  # 1 ms of idle time between copies: step windows stay well separated
# Args that pair events: kernel/memcpy <-> runtime call, GPU op <-> CPU op, Python frame <-> its parent frame.
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")
FLOW_PHASES = ("s", "t", "f")  # flow events: their ``id`` pairs a start with its finish
STEP_NAME = re.compile(r"ProfilerStep#(\d+)")
GZIP_LEVEL = 6
TS_TEXT = re.compile(rb"-?\d+\.\d{3}")  # how a time is written: microseconds, exactly three decimals

_DECODER = msgspec.json.Decoder(float_hook=msgspec.Raw)  # floats stay their source text
_ENCODER = msgspec.json.Encoder()
_THOUSAND = Decimal(1000)


@dataclass(frozen=True)
class TileStats:
    target: Path
    copies: int
    events: int  # traceEvents written
    copied: int  # source events that were copied (per copy)
    kept: int  # source events written once (metadata, instants, the Trace span)
    steps: tuple[int, int]  # first and last ProfilerStep number written, (0, -1) when there are none
    shift_ns: int
    id_shift: int
    rounded: int  # source times that had more than three decimals (rounded to the nanosecond)


def _read(path: Path) -> tuple[dict[str, msgspec.Raw], list[Any]]:
    """(top-level key -> its text, the decoded traceEvents)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
        events = _DECODER.decode(top["traceEvents"]) if "traceEvents" in top else None
    except msgspec.DecodeError as error:
        raise SystemExit(f"tile_trace: {path}: not JSON ({error})") from None
    if not isinstance(events, list):
        raise SystemExit(f"tile_trace: {path}: not a Kineto trace (no traceEvents list)")
    return top, events


def _text(value: Any) -> str:
    return bytes(value).decode() if isinstance(value, msgspec.Raw) else str(value)


def _ns(value: Any) -> tuple[int, bool]:
    """(nanoseconds, rounded) for a time in microseconds as decoded (an int, or a float's text)."""
    if isinstance(value, int):
        return value * 1000, False
    exact = Decimal(_text(value)) * _THOUSAND
    ns = int(exact.to_integral_value(ROUND_HALF_EVEN))
    return ns, ns != exact


def _us(ns: int) -> msgspec.Raw:
    """Nanoseconds as Kineto writes a time: microseconds with three decimals."""
    whole, frac = divmod(abs(ns), 1000)
    return msgspec.Raw(f"{'-' if ns < 0 else ''}{whole}.{frac:03d}")


def _is_kept(event: dict[str, Any]) -> bool:
    return event.get("ph") in ("M", "i", "I") or event.get("cat") == "Trace"


class _Plan:
    """What changes from copy to copy, gathered once from the source events."""

    def __init__(self, events: list[dict[str, Any]]):
        self.events = events
        self.ts: list[int | None] = []  # None: the event has no ts
        self.rounded = 0
        self.ids: list[tuple[dict[str, Any], str, int]] = []  # (owner, key, source id)
        self.steps: list[tuple[dict[str, Any], re.Match[str]]] = []
        lo = hi = None
        max_id = -1
        for event in events:
            if "ts" in event:
                ts, rounded = _ns(event["ts"])
                self.rounded += rounded
                self.ts.append(ts)
                end = ts + (_ns(event["dur"])[0] if "dur" in event else 0)
                lo = ts if lo is None else min(lo, ts)
                hi = end if hi is None else max(hi, end)
            else:
                self.ts.append(None)
            args = event.get("args")
            if isinstance(args, dict):
                for key in ID_ARGS:
                    if isinstance(args.get(key), int):
                        self.ids.append((args, key, args[key]))
            if event.get("ph") in FLOW_PHASES and isinstance(event.get("id"), int):
                self.ids.append((event, "id", event["id"]))
            name = event.get("name")
            if isinstance(name, str) and (match := STEP_NAME.fullmatch(name)):
                self.steps.append((event, match))
        for _, _, value in self.ids:
            max_id = max(max_id, value)
        numbers = [int(m.group(1)) for _, m in self.steps]
        self.first_step = min(numbers, default=0)
        self.step_count = max(numbers) - self.first_step + 1 if numbers else 0
        self.lo = lo if lo is not None else 0
        self.hi = hi if hi is not None else 0
        self.shift = self.hi - self.lo + GAP_NS
        self.id_shift = max_id + 1

    def lines(self, k: int) -> Iterator[bytes]:
        """The events of copy k, encoded (the source's own events for k = 0)."""
        offset = k * self.shift
        for event, ts in zip(self.events, self.ts, strict=True):
            if ts is not None:
                event["ts"] = _us(ts + offset)
        for owner, key, value in self.ids:
            owner[key] = value + k * self.id_shift
        for event, match in self.steps:
            event["name"] = f"ProfilerStep#{int(match.group(1)) + k * self.step_count}"
        return map(_ENCODER.encode, self.events)


def _kept_lines(kept: list[dict[str, Any]], plan: _Plan, copies: int) -> Iterator[bytes]:
    extra = (copies - 1) * plan.shift
    for event in kept:
        event = dict(event)
        if event.get("cat") == "Trace" and "dur" in event:
            event["dur"] = _us(_ns(event["dur"])[0] + extra)
        if "ts" in event:
            ts, _ = _ns(event["ts"])
            if event.get("ph") in ("i", "I") and ts >= plan.hi:
                ts += extra
            event["ts"] = _us(ts)
        yield _ENCODER.encode(event)


def _open(path: Path, compress: bool, level: int):
    return gzip.open(path, "wb", compresslevel=level) if compress else path.open("wb")


def tile(source: Path, target: Path, copies: int, level: int = GZIP_LEVEL, log=print) -> TileStats:
    if copies < 1:
        raise SystemExit("tile_trace: --copies must be at least 1")
    source, target = source.resolve(), target.resolve()
    if source == target:
        raise SystemExit("tile_trace: the target must differ from the source (the source is never changed)")
    top, events = _read(source)
    if not all(isinstance(e, dict) for e in events):
        raise SystemExit(f"tile_trace: {source}: traceEvents holds something other than event objects")
    kept = [e for e in events if _is_kept(e)]
    copied = [e for e in events if not _is_kept(e)]
    plan = _Plan(copied)
    del events
    building = target.with_name(target.name + ".building")
    written = 0
    with _open(building, target.name.endswith(".gz"), level) as out:
        out.write(b"{")
        for index, (key, value) in enumerate(top.items()):
            out.write(b",\n" if index else b"\n")
            out.write(_ENCODER.encode(key) + b": ")
            if key != "traceEvents":
                out.write(bytes(value))  # as the source wrote it: readers grep the header ("rank": N)
                continue
            out.write(b"[\n")
            for k in range(copies):
                began = time.perf_counter()
                if written:
                    out.write(b",\n")
                out.write(b",\n".join(plan.lines(k)))
                written += len(copied)
                if k:
                    log(f"tile_trace: copy {k} of {copies - 1} ({time.perf_counter() - began:.1f} s)")
            if kept:
                if written:
                    out.write(b",\n")
                out.write(b",\n".join(_kept_lines(kept, plan, copies)))
                written += len(kept)
            out.write(b"\n]")
        out.write(b"\n}\n")
    building.replace(target)
    first = plan.first_step
    last = first + copies * plan.step_count - 1
    return TileStats(target, copies, written, len(copied), len(kept), (first, last), plan.shift, plan.id_shift,
                     plan.rounded)


# --- check -----------------------------------------------------------------------------------------------------


class _Args(msgspec.Struct):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")


class _Event(msgspec.Struct):
    ph: str = ""
    name: str = ""
    cat: str = ""
    ts: msgspec.Raw = msgspec.Raw(b"")
    id: int | str | None = None
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]  # noqa: N815 (the trace's key)


def check(target: Path, source: Path, copies: int) -> list[str]:
    """What a tiled trace gets wrong (empty when it is right); decodes only the fields it checks."""
    def load(path: Path) -> tuple[list[_Event], dict[str, Any]]:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])  # validates the whole document
        head = {k: msgspec.json.decode(v) for k, v in top.items() if k != "traceEvents"}
        return msgspec.json.decode(data, type=_Trace).traceEvents, head

    problems = []
    src_events, src_head = load(source)
    events, head = load(target)
    if head != src_head:
        problems.append(f"top-level keys differ: {sorted(set(head) ^ set(src_head)) or 'values changed'}")
    src_kept = sum(1 for e in src_events if e.ph in ("M", "i", "I") or e.cat == "Trace")
    expected = copies * (len(src_events) - src_kept) + src_kept
    if len(events) != expected:
        problems.append(f"{len(events):,} events, expected {expected:,}")
    bad_ts = [e.ts for e in events if not TS_TEXT.fullmatch(bytes(e.ts))]
    if bad_ts:
        problems.append(f"{len(bad_ts):,} ts not written with three decimals, e.g. {bytes(bad_ts[0])!r}")

    def steps(evs: list[_Event]) -> list[int]:
        return sorted(int(m.group(1)) for e in evs if (m := STEP_NAME.fullmatch(e.name)))

    src_steps, got_steps = steps(src_events), steps(events)
    if src_steps:
        first, count = src_steps[0], src_steps[-1] - src_steps[0] + 1
        want = [n + k * count for k in range(copies) for n in src_steps]
        if got_steps != sorted(want):
            last = first + copies * count - 1
            problems.append(f"steps {got_steps[:3]}..{got_steps[-3:]}, expected #{first}..#{last}")

    def distinct(evs: list[_Event]) -> dict[str, tuple[int, int]]:
        found: dict[str, list[Any]] = {"correlation": [], "External id": [], "flow id": []}
        for e in evs:
            if e.args is not None:
                if e.args.correlation is not None:
                    found["correlation"].append(e.args.correlation)
                if e.args.external_id is not None:
                    found["External id"].append(e.args.external_id)
            if e.ph in FLOW_PHASES and e.id is not None:
                found["flow id"].append((e.ph, e.cat, e.id))
        return {key: (len(values), len(set(values))) for key, values in found.items()}

    src_ids, ids = distinct(src_events), distinct(events)
    for key, (src_n, src_d) in src_ids.items():
        n, d = ids[key]
        if (n, d) != (copies * src_n, copies * src_d):
            problems.append(f"{key}: {n:,} values, {d:,} distinct; expected {copies * src_n:,}, {copies * src_d:,}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="Kineto trace to tile, .json or .json.gz (read only)")
    parser.add_argument("target", type=Path, help="trace to create, gzip when it ends in .gz (replaced if it exists)")
    parser.add_argument("--copies", type=int, default=15, help="how many times the source (default 15)")
    parser.add_argument("--level", type=int, default=GZIP_LEVEL, help=f"gzip level (default {GZIP_LEVEL})")
    parser.add_argument("--check", action="store_true", help="re-read the result and check it; exit 1 if wrong")
    args = parser.parse_args(argv)
    if not args.source.is_file():
        print(f"tile_trace: {args.source}: no such file", file=sys.stderr)
        return 2
    began = time.perf_counter()
    stats = tile(args.source, args.target, args.copies, args.level)
    size = args.target.stat().st_size / 1e6
    first, last = stats.steps
    steps = f"steps #{first}..#{last}" if last >= first else "no ProfilerStep ranges"
    print(f"tile_trace: wrote {args.target} ({size:,.1f} MB, {args.copies}x, {stats.events:,} events "
          f"= {args.copies} x {stats.copied:,} + {stats.kept} kept, {steps}, shift {stats.shift_ns / 1e6:.3f} ms, "
          f"id shift {stats.id_shift:,}) in {time.perf_counter() - began:.1f} s")
    if stats.rounded:
        print(f"tile_trace: {stats.rounded:,} source times had more than three decimals (rounded to the ns)")
    if args.check:
        problems = check(args.target, args.source, args.copies)
        for problem in problems:
            print(f"tile_trace: check: {problem}", file=sys.stderr)
        print(f"tile_trace: check: {'FAIL' if problems else 'ok'}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
