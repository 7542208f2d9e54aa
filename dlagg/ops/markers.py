"""NVTX range names -> op fields, decided once per distinct string.

Contract: ``parse_markers(strings, text_ids) -> Parsed`` with, per input row, ``name`` (code
into ``names``) and ``seq`` (autograd sequence number, -1 when the marker has none); ``names``
has one row per distinct marker name: ``kind``, ``op_name`` (what the reports show), ``op_type``
(normalised op), ``direction``, and for DLProf/PyProf dict markers ``stack`` (file:line list),
``data_types`` and ``input_shapes``. ``input_shapes(strings, text_ids)`` reads emit_nvtx's
``sizes = [...]`` for the few ranges that need it.

Formats recognised (see docs/ops.md):

- PyTorch ``emit_nvtx``: ``aten::conv2d, seq = 12, op_id = 200, sizes = [[...]], input_op_ids =
  [...]``; backward nodes ``ConvolutionBackward0, seq = ...``, ``autograd::engine::evaluate_function:
  ConvolutionBackward0, op_id = ...``, ``torch::autograd::AccumulateGrad, op_id = ...``. The name
  is the text before ``, seq =``/``, op_id =``; older PyTorch writes ``aten::empty`` alone.
- DLProf / PyProf dict markers: ``{'traceMarker': [...], 'funcStack': '/<module>/...'}`` and
  ``{'mod': 'torch.nn.functional', 'op': 'conv2d', 'args': [{'shape': ..., 'dtype': ...}]}``.
  Other dict/JSON markers (DLProf's ``{"model_config": ...}``) define no op.
- Anything else is a plain range (``forward``, ``data``, a library's ``cub::DeviceRadixSort``);
  the caller tells user ranges from library ranges by their NVTX domain.

The split into name and suffix runs once over the whole string table with pyarrow's RE2
``extract_regex`` (about 0.3 s for the 0.85 M strings of transformer_amp_large; pandas'
``.str.extract`` takes several times longer on the same pyarrow strings); everything else is
decided per distinct name, of which a large recording has a few hundred.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..model import StringTable

# Marker kinds.
USER = 0  # plain range in the default domain: groups ops, or is an op when it encloses none
LIBRARY = 1  # plain range in a library's own domain (cuBLAS, CCCL, libcudf, TensorRT, ...)
FORWARD = 2  # emit_nvtx forward op (aten::..., prim::...)
BACKWARD = 3  # autograd backward node or engine range
TRACE = 4  # DLProf/PyProf {'traceMarker': ..., 'funcStack': ...}
MODOP = 5  # DLProf/PyProf {'mod': ..., 'op': ..., 'args': ...}
IGNORE = 6  # other dict/JSON markers ({"model_config": ...}): no op, no group
FRAMEWORK = (FORWARD, BACKWARD, TRACE, MODOP)

FPROP, BPROP = "fprop", "bprop"

# The name of an emit_nvtx marker ends where its first ", key = value" suffix begins.
_HEAD = r"^(?P<head>[^,]*(?:, (?:seq|op_id) = )?)"
_SUFFIXES = (", seq = ", ", op_id = ")
_SEQ = r"^[^,]*, seq = (?P<seq>\d+)"
# emit_nvtx's record_shapes suffix (parsed for op heads only).
SIZES = r", sizes = (?P<sizes>\[.*?\])(?:, input_op_ids = .*)?$"

_ENGINE_PREFIX = "autograd::engine::evaluate_function: "
_BACKWARD_NODE = re.compile(r"^(?:torch::autograd::)?(?P<node>[A-Z]\w*?)(?:Backward\d*)?$")
_IS_BACKWARD = re.compile(r"Backward\d*$|^torch::autograd::")
_NAMESPACE = re.compile(r"^(?:\w+::)+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalise_op(name: str) -> str:
    """``aten::relu_`` -> ``relu``; ``torch.nn.functional.conv2d`` -> ``conv2d``."""
    op = _NAMESPACE.sub("", name).rsplit(".", 1)[-1]
    return op[:-1] if len(op) > 1 and op.endswith("_") and not op.endswith("__") else op


def backward_op(name: str) -> tuple[str, str]:
    """(node name, op type) of a backward marker: ``ConvolutionBackward0`` -> ``convolution``."""
    node = name[len(_ENGINE_PREFIX):] if name.startswith(_ENGINE_PREFIX) else name
    match = _BACKWARD_NODE.match(node)
    stem = match.group("node") if match else _NAMESPACE.sub("", node)
    return _NAMESPACE.sub("", node) if node.startswith("torch::autograd::") else node, _CAMEL.sub("_", stem).lower()


def _dict_fields(text: str) -> dict[str, object] | None:
    """A DLProf/PyProf dict marker as a dict, or None when the text is not one."""
    try:
        value = ast.literal_eval(text)  # PyProf/DLProf write Python reprs: single quotes, tuples
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        try:
            value = json.loads(text)  # DLProf's {"model_config": {"emit_nvtx": true}} is JSON
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _args(fields: dict[str, object]) -> tuple[str, str]:
    """(data types, input shapes) of a {'mod','op','args'} marker's tensor arguments."""
    dtypes: list[str] = []
    shapes: list[str] = []
    args = fields.get("args")
    for arg in args if isinstance(args, list) else []:
        if isinstance(arg, dict) and "shape" in arg:
            shapes.append(str(list(arg["shape"])) if isinstance(arg["shape"], (tuple, list)) else str(arg["shape"]))
            if arg.get("dtype"):
                dtypes.append(str(arg["dtype"]))
    return ",".join(dict.fromkeys(dtypes)), "; ".join(shapes)


def classify_name(name: str, has_suffix: bool) -> dict[str, object]:
    """Kind and op fields of one distinct marker name."""
    row: dict[str, object] = {"kind": USER, "op_name": name, "op_type": name, "direction": "", "stack": "",
                              "data_types": "", "input_shapes": ""}
    if name.startswith("{"):
        fields = _dict_fields(name)
        if fields is None:
            return row
        if "traceMarker" in fields or "funcStack" in fields:
            stack = fields.get("funcStack")
            trace = fields.get("traceMarker")
            op_name = str(stack) if stack else name
            row.update(kind=TRACE, op_name=op_name, op_type=normalise_op(op_name.rstrip("/").rsplit("/", 1)[-1]),
                       direction=FPROP, stack="\n".join(map(str, trace)) if isinstance(trace, list) else "")
        elif "op" in fields:
            mod, op = str(fields.get("mod", "")), str(fields["op"])
            data_types, shapes = _args(fields)
            row.update(kind=MODOP, op_name=f"{mod}.{op}" if mod else op, op_type=normalise_op(op), direction=FPROP,
                       data_types=data_types, input_shapes=shapes)
        else:
            row.update(kind=IGNORE)
        return row
    if name.startswith(_ENGINE_PREFIX) or _IS_BACKWARD.search(name):
        node, op_type = backward_op(name)
        row.update(kind=BACKWARD, op_name=node, op_type=op_type, direction=BPROP)
    elif has_suffix or "::" in name:
        # Dispatcher ops carry a namespace (aten::, prim::); suffixed names without one are
        # record_function scopes such as "Optimizer.step#SGD.step", of no known direction.
        row.update(kind=FORWARD, op_type=normalise_op(name), direction=FPROP if "::" in name else "")
    return row


def _arrow(values: pd.Series) -> pa.ChunkedArray:
    """The strings as arrow data, without a copy (the text of a big export is a gigabyte)."""
    array = pa.array(values.array) if not isinstance(values.dtype, np.dtype) else pa.array(values.astype(str))
    return array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])


def _take(text: pa.ChunkedArray, positions: np.ndarray) -> pa.Array:
    """``text[positions]``, taken chunk by chunk: ``ChunkedArray.take`` costs time in proportion to the
    number of chunks even for a handful of rows, and combining the chunks first copies all the text."""
    if len(positions) == 0:
        return pa.array([], type=text.type)
    bounds = np.cumsum([0] + [len(c) for c in text.chunks])
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    cuts = np.searchsorted(ordered, bounds)
    pieces = [text.chunk(k).take(pa.array(ordered[cuts[k]:cuts[k + 1]] - bounds[k]))
              for k in range(text.num_chunks) if cuts[k + 1] > cuts[k]]  # chunks, not rows
    taken = pa.concat_arrays(pieces)
    return taken.take(pa.array(np.argsort(order, kind="stable")))


def distinct_ids(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct non-negative ids (a mark table: O(n), faster than np.unique on big id arrays)."""
    ids = np.asarray(ids, dtype=np.int64)
    ids = ids[ids >= 0]
    if len(ids) == 0:
        return ids
    seen = np.zeros(int(ids.max()) + 1, dtype=bool)
    seen[ids] = True
    return np.flatnonzero(seen).astype(np.int64)


def _lookup(ids: np.ndarray, values: np.ndarray, wanted: np.ndarray, missing: int = -1) -> np.ndarray:
    """values[i] for each wanted id equal to ids[i] (ids sorted, distinct, non-negative), else `missing`."""
    wanted = np.asarray(wanted, dtype=np.int64)
    table = np.full(int(max(ids.max(initial=-1), wanted.max(initial=-1))) + 2, missing, dtype=np.int64)
    table[ids] = values
    return table[np.where(wanted >= 0, wanted, len(table) - 1)]


def _positions(index: pd.Index, ids: np.ndarray) -> np.ndarray:
    """Row of each id in the string table (-1 when absent); ids are the rows when the table is dense."""
    n = len(index)
    if n and index.is_monotonic_increasing and index[0] == 0 and index[-1] == n - 1:
        return np.where(ids < n, ids, -1)
    return index.get_indexer(ids)


def _flags(values: pa.Array) -> np.ndarray:
    return pc.fill_null(values, False).to_numpy(zero_copy_only=False).astype(bool)


def _encode(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes of `values` and the distinct values (arrow-side, no Python string per row)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), []
    encoded = pc.dictionary_encode(values, null_encoding="encode")
    if isinstance(encoded, pa.ChunkedArray):  # the chunks share one dictionary: only indices are joined
        encoded = encoded.combine_chunks()
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            [v or "" for v in encoded.dictionary.to_pylist()])


@dataclass(frozen=True)
class Parsed:
    name: np.ndarray  # per input row: code into `names`, -1 for an unknown text id
    seq: np.ndarray  # per input row: autograd sequence number, -1 when none
    names: pd.DataFrame  # index: name code; kind, op_name, op_type, direction, stack, data_types, input_shapes


def parse_markers(strings: StringTable, text_ids: np.ndarray) -> Parsed:
    """Op fields of NVTX texts: `text_ids` is one id per range; work is done once per distinct id."""
    text_ids = np.asarray(text_ids, dtype=np.int64)
    ids = distinct_ids(text_ids)
    table = strings.values
    positions = _positions(table.index, ids)
    ids = ids[positions >= 0]
    positions = positions[positions >= 0]
    text = _arrow(table)
    # Two regexes anchored at the start read only the head of each text (the sizes lists behind
    # can be long); one capture group each: a single pattern with several optional capture groups
    # is several times slower in RE2 (1.5 s against 2 x 0.45 s on the 3.4 M texts of a 4x run).
    seq_text = pc.struct_field(pc.extract_regex(text, _SEQ), "seq")  # null where there is no seq
    seq = pc.fill_null(pc.cast(seq_text, pa.int64()), -1).to_numpy(zero_copy_only=False)[positions]
    # The head is the name plus ", seq = " or ", op_id = " when the text is an emit_nvtx marker:
    # few distinct heads, so telling name and suffix apart is done per distinct head.
    head_codes, heads = _encode(pc.struct_field(pc.extract_regex(text, _HEAD), "head"))
    head_codes = head_codes[positions]
    head_suffixed = np.array([h.endswith(_SUFFIXES) for h in heads], dtype=bool)
    suffix = head_suffixed[head_codes] if len(heads) else np.zeros(len(ids), dtype=bool)

    # Only emit_nvtx names are cut at the first comma; plain and dict markers keep their whole text
    # (few distinct strings, so taking them is cheap).
    used = distinct_ids(head_codes[suffix])
    remap = np.zeros(len(heads), dtype=np.int64)
    remap[used] = np.arange(len(used))
    cut_codes = remap[head_codes[suffix]]
    cut_names = [heads[i].rsplit(", ", 1)[0] for i in used]  # drop the ", seq = " / ", op_id = "
    whole_codes, whole_names = _encode(_take(text, positions[~suffix]))
    merged, uniques = pd.factorize(pd.Series(cut_names + whole_names, dtype=object))
    codes = np.empty(len(ids), dtype=np.int64)
    codes[suffix] = merged[:len(used)][cut_codes]
    codes[~suffix] = merged[len(used):][whole_codes]
    # a name is an emit_nvtx name when any of its texts carried a suffix
    suffixed = np.zeros(len(uniques), dtype=bool)
    suffixed[codes[suffix]] = True
    rows = [classify_name(str(n), bool(s)) for n, s in zip(uniques, suffixed, strict=True)]
    names_frame = pd.DataFrame(rows, index=pd.RangeIndex(len(uniques)),
                               columns=["kind", "op_name", "op_type", "direction", "stack", "data_types",
                                        "input_shapes"])
    names_frame["kind"] = names_frame["kind"].astype(np.int8)
    return Parsed(_lookup(ids, codes, text_ids), _lookup(ids, seq, text_ids), names_frame)


def input_shapes(strings: StringTable, text_ids: np.ndarray) -> np.ndarray:
    """emit_nvtx ``sizes = [...]`` text per row of `text_ids` ('' when absent); call it for op heads only."""
    text_ids = np.asarray(text_ids, dtype=np.int64)
    ids = distinct_ids(text_ids)
    positions = _positions(strings.values.index, ids)
    ids, positions = ids[positions >= 0], positions[positions >= 0]
    if len(ids) == 0:
        return np.full(len(text_ids), "", dtype=object)
    sizes = pc.struct_field(pc.extract_regex(_take(_arrow(strings.values), positions), SIZES), "sizes")
    shapes = np.asarray([s or "" for s in sizes.to_pylist()] + [""], dtype=object)
    return shapes[_lookup(ids, np.arange(len(ids)), text_ids, missing=len(ids))]
