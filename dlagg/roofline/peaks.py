"""User-given ceilings (a peaks file), replacing ncu's own where they name a ceiling.

Contract: ``load_peaks(path) -> Peaks``; ``apply_peaks(ceilings, peaks) -> Ceilings``. A file that
is not valid JSON, names an unknown ceiling or gives a non-positive value raises one `InputError`.

Format (docs/roofline.md): a JSON object whose ``"ceilings"`` object maps ceiling keys to values
per second::

    {"ceilings": {"dram_bytes_per_s": 4.26e12, "tensor_fp16_flop_per_s": 7.62e14}}

Keys: ``dram_bytes_per_s``, ``l2_bytes_per_s``, ``l1_bytes_per_s``, ``fp64_flop_per_s``,
``fp32_flop_per_s``, ``fp16_flop_per_s``, ``tensor_{fp16,bf16,tf32,fp64,fp8}_flop_per_s``,
``tensor_{int8,int1}_op_per_s``. A key may carry a suffix naming how it was measured
(``dram_bytes_per_s_read``); several keys for one ceiling give the highest, since a ceiling is the
best the machine has shown. The ``"measured"`` object written by the fixtures' ``peaks.py``
(``../shared/fixtures/ncu/peaks.json``) is read too: its ``matmul_<type>`` results are the
tensor ceilings, ``matmul_fp32_simt_*`` and ``fp32_ffma_*`` the FP32 one. Ceilings the file does
not give stay ncu's own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import InputError
from .measure import Ceilings
from .metrics import CEILINGS


def ceiling_key(resource: str) -> str:
    """The peaks-file key of a resource: ``DRAM`` -> ``dram_bytes_per_s``, ``Tensor INT8`` ->
    ``tensor_int8_op_per_s``."""
    unit = {"B/s": "bytes", "FLOP/s": "flop", "OP/s": "op"}[CEILINGS[resource].unit]
    return f"{resource.lower().replace(' ', '_')}_{unit}_per_s"


KEYS = {ceiling_key(r): r for r in CEILINGS}
# Names used by fixtures/workloads/peaks.py in its "measured" object (prefix -> resource).
MEASURED_ALIASES = {
    "matmul_fp16_": "Tensor FP16",
    "matmul_bf16_": "Tensor BF16",
    "matmul_tf32_": "Tensor TF32",
    "matmul_fp8": "Tensor FP8",
    "matmul_fp64_": "Tensor FP64",  # cuBLAS DGEMM runs DMMA on sm80+
    "matmul_fp32_simt": "FP32",
    "fp32_ffma": "FP32",
}


@dataclass(frozen=True)
class Peaks:
    values: Mapping[str, float]  # resource -> per second
    keys: Mapping[str, str]  # resource -> the key(s) of the file that gave it
    source: str  # file name


def _resource(key: str, aliases: bool) -> str | None:
    for canonical, resource in KEYS.items():
        if key == canonical or key.startswith(canonical + "_"):
            return resource
    if aliases:
        return next((r for prefix, r in MEASURED_ALIASES.items() if key.startswith(prefix)), None)
    return None


def load_peaks(path: str | Path) -> Peaks:
    """Read a peaks file (format in the module docstring)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; pass a peaks JSON file (docs/roofline.md shows the format)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: is not valid JSON ({exc}); fix the peaks file (docs/roofline.md)") from None
    if not isinstance(data, dict) or not ({"ceilings", "measured"} & set(data)):
        raise InputError(f"{path}: has no \"ceilings\" object; write {{\"ceilings\": {{\"dram_bytes_per_s\": ...}}}} "
                         "(docs/roofline.md lists the keys)")
    found: dict[str, list[tuple[float, str]]] = {}
    for section, strict in (("measured", False), ("ceilings", True)):
        entries = data.get(section, {})
        if not isinstance(entries, dict):
            raise InputError(f"{path}: \"{section}\" must be an object of ceiling keys and values per second")
        for key, value in entries.items():
            resource = _resource(key, aliases=not strict)
            if resource is None:
                if strict:
                    raise InputError(f"{path}: unknown ceiling \"{key}\"; known: {', '.join(KEYS)}")
                continue  # the measuring script's notes and run records
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                if strict or isinstance(value, int | float):
                    raise InputError(f"{path}: \"{key}\" must be a positive number per second, not {value!r}")
                continue
            found.setdefault(resource, []).append((float(value), f"{section}.{key}"))
    if not found:
        raise InputError(f"{path}: names no ceiling dlagg knows; known keys: {', '.join(KEYS)}")
    values = {r: max(v for v, _ in pairs) for r, pairs in found.items()}
    keys = {r: max(pairs)[1] + (f" (highest of {len(pairs)})" if len(pairs) > 1 else "") for r, pairs in found.items()}
    return Peaks(values, keys, path.name)


def apply_peaks(ceilings: Ceilings, peaks: Peaks) -> Ceilings:
    """`ceilings` with the resources `peaks` gives replaced by its values (the same for every kernel)."""
    values = ceilings.values.copy()
    sources = dict(ceilings.sources)
    for resource, value in peaks.values.items():
        values[resource] = pd.Series(value, index=values.index, dtype="float64")
        sources[resource] = f"{peaks.source}: {peaks.keys[resource]}"
    return Ceilings(values, sources)
