"""NVTX range names -> op fields, decided once per distinct name.

Contract: ``parse_markers(strings, nvtx_names, seq_ids) -> Parsed``: ``names`` has one row per distinct
range name, ``codes(text_ids)`` maps the ranges' name ids to rows of it. Per name: ``kind``, ``op_name``
(what the reports show), ``op_type``, ``direction``, ``stack_named`` (the op name is a DLProf function
stack), and for DLProf/PyProf dict markers ``stack`` (file:line list), ``data_types`` and
``input_shapes``. ``Parsed.dict_markers`` says the profile holds DLProf/PyProf dict markers, which
switches the op rules to theirs (``ops/assign.py``). The reader has already cut emit_nvtx's
per-call details off every text and kept the autograd ``seq`` apart (``reader/nvtx.py``), so a
large recording has a few hundred distinct names for 0.85 M ranges.

Formats recognised (see docs/ops.md):

- PyTorch ``emit_nvtx``: ``aten::conv2d, seq = 12, op_id = 200, sizes = [[...]], input_op_ids =
  [...]`` (read as the name ``aten::conv2d``); backward nodes ``ConvolutionBackward0, seq = ...``,
  ``autograd::engine::evaluate_function: ConvolutionBackward0, op_id = ...``,
  ``torch::autograd::AccumulateGrad, op_id = ...``; older PyTorch (1.4, the PyProf era) writes
  ``conv2d, seq = 3`` without a namespace, and ``aten::empty`` alone.
- DLProf / PyProf dict markers (Python reprs, read with ``ast.literal_eval``, never ``eval``):
  ``{'traceMarker': [...], 'funcStack': '/<module>/...'}`` (PyProf writes no ``funcStack``) and
  ``{'mod': 'torch.nn.functional', 'op': 'conv2d', 'args': [{'shape': ..., 'dtype': ...}]}``.
  Other dict/JSON markers (DLProf's ``{"model_config": ...}``) define no op.
- Anything else is a plain range (``forward``, ``data``, a library's ``cub::DeviceRadixSort``);
  the caller tells user ranges from library ranges by their NVTX domain.

Names and types as DLProf writes them for dict markers: the op name is the function stack without
``<``/``>`` (``/module/net::forward/...``, not ``/<module>/...``) and with repeats as ``[N]`` (the
marker's ``Conv2d::_call_impl(2)`` is the reports' ``Conv2d::_call_impl[2]``); the op type is the
marker's ``op`` as written (``uniform_`` keeps its in-place underscore). In a profile with dict
markers the emit_nvtx names keep theirs too (``add_``, as PyProf reports them); elsewhere
``aten::relu_`` is the op type ``relu``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import StringTable

# Marker kinds.
USER = 0  # plain range in the default domain: groups ops, or is an op when it encloses none
LIBRARY = 1  # plain range in a library's own domain (cuBLAS, CCCL, libcudf, TensorRT, ...)
FORWARD = 2  # emit_nvtx forward op (aten::..., prim::...)
BACKWARD = 3  # autograd backward node or engine range
TRACE = 4  # DLProf/PyProf {'traceMarker': ..., 'funcStack': ...}
MODOP = 5  # DLProf/PyProf {'mod': ..., 'op': ..., 'args': ...}
IGNORE = 6  # other dict/JSON markers ({"model_config": ...}): no op, no group
PASS = 7  # set per range by the op rules: defines nothing itself, but encloses ranges that do

FPROP, BPROP = "fprop", "bprop"

_ENGINE_PREFIX = "autograd::engine::evaluate_function: "
_BACKWARD_NODE = re.compile(r"^(?:torch::autograd::)?(?P<node>[A-Z]\w*?)(?:Backward\d*)?$")
_IS_BACKWARD = re.compile(r"Backward\d*$|^torch::autograd::")
_NAMESPACE = re.compile(r"^(?:\w+::)+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_REPEAT = re.compile(r"\((\d+)\)")


def normalise_op(name: str) -> str:
    """``aten::relu_`` -> ``relu``; ``torch.nn.functional.conv2d`` -> ``conv2d``."""
    op = _NAMESPACE.sub("", name).rsplit(".", 1)[-1]
    return op[:-1] if len(op) > 1 and op.endswith("_") and not op.endswith("__") else op


def strip_namespace(name: str) -> str:
    """``aten::add_`` -> ``add_``: the op as a dict-marker profile reports it (no in-place normalisation)."""
    return _NAMESPACE.sub("", name)


def stack_name(func_stack: str) -> str:
    """DLProf's op name for a function stack: ``/<module>/Net::_call_impl(2)/conv2d`` ->
    ``/module/Net::_call_impl[2]/conv2d``."""
    return _REPEAT.sub(r"[\1]", func_stack.replace("<", "").replace(">", ""))


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


# DLProf's dimension labels of a convolution's input and filter (NCHW / KCRS and their 1-D and 3-D
# forms) and of a linear layer's input and weight (NK / MK): the Input Shapes column reads
# <N:32, C:3, H:32, W:32>; <K:6, C:3, R:3, S:3>; <6> and <N:32, K:400>; <M:120, K:400>; <120>.
_CONV = re.compile(r"^conv(?:_transpose)?[123]d$|^conv_tbc$")
_CONV_LABELS = {0: {3: "NCW", 4: "NCHW", 5: "NCDHW"}, 1: {3: "KCS", 4: "KCRS", 5: "KCTRS"}}
_LINEAR_LABELS = {0: {2: "NK"}, 1: {2: "MK"}}
# Output Shapes (DLProf 1.8 wrote them for PyTorch: <N:32, K:6, P:30, Q:30>, <N:32, M:120>): a convolution's
# output dimensions, and F.conv*d's parameters in order (a marker's non-tensor arguments by name or position).
_CONV_OUT = re.compile(r"^conv[123]d$")
_CONV_OUT_LABELS = {3: "NKQ", 4: "NKPQ", 5: "NKOPQ"}
_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


def _labelled(labels: str, dims: Sequence[object]) -> str:
    if labels:
        return "<" + ", ".join(f"{label}:{dim}" for label, dim in zip(labels, dims, strict=True)) + ">"
    return "<" + ", ".join(str(d) for d in dims) + ">"


def labelled_shape(op: str, position: int, shape: object) -> str:
    """One tensor argument's shape as DLProf writes it: ``<N:32, C:3, H:32, W:32>`` for a convolution's
    input and filter, ``<N:32, K:400>`` for a 2-D linear input and weight, ``<6>`` otherwise."""
    dims = list(shape) if isinstance(shape, (tuple, list)) else [shape]
    table = _CONV_LABELS if _CONV.match(op) else _LINEAR_LABELS if op == "linear" else {}
    return _labelled(table.get(position, {}).get(len(dims), ""), dims)


def _ints(value: object, count: int) -> list[int] | None:
    """A convolution parameter (an int, or one per spatial dimension) as `count` ints; None: not such a value."""
    values = list(value) if isinstance(value, (tuple, list)) else [value] * count
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(values) != count or len(ints) != len(values):
        return None
    return ints


def _conv_output(tensors: list[list[int]], params: dict[str, object]) -> str:
    """A convolution's output shape, only where the marker determines it: the input and weight shapes and the
    stride and padding it recorded (a marker that recorded them recorded every argument passed, so an absent
    dilation is PyTorch's default, 1). No stride or padding in the marker (DLProf's plugin recorded tensors
    only): unknown, ''."""
    if len(tensors) < 2 or "stride" not in params or "padding" not in params:
        return ""
    (x, w), spatial = tensors[:2], len(tensors[0]) - 2
    if len(w) != len(x) or spatial < 1 or len(x) not in _CONV_OUT_LABELS:
        return ""
    stride, dilation = _ints(params["stride"], spatial), _ints(params.get("dilation", 1), spatial)
    padding = params["padding"]
    if padding == "valid":
        padding = 0
    if padding == "same":
        out = x[2:] if stride == [1] * spatial else None
    else:
        pad = _ints(padding, spatial)
        out = None if stride is None or dilation is None or pad is None else [
            (size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in zip(x[2:], w[2:], stride, pad, dilation,
                                                                                  strict=True)]
    if out is None or min(out) < 1:
        return ""
    return _labelled(_CONV_OUT_LABELS[len(x)], [x[0], w[0], *out])


def output_shape(op: str, args: list[object]) -> str:
    """The output shape of a {'mod','op','args'} marker's op where its arguments determine it (docs/ops.md,
    "Output Shapes"): a convolution (`_conv_output`), a linear layer (input ``(..., K)`` and weight ``(M, K)``
    give ``(..., M)``: ``<N:32, M:120>`` for a 2-D input); '' for any other op or shapes that do not fit."""
    tensors: list[list[int]] = []
    params: dict[str, object] = {}
    for position, arg in enumerate(args):
        if not isinstance(arg, dict):
            continue
        if "shape" in arg:
            shape = arg["shape"]
            tensors.append(list(shape) if isinstance(shape, (tuple, list)) else [shape])
        elif "value" in arg:
            name = str(arg.get("name") or (_CONV_PARAMS[position] if position < len(_CONV_PARAMS) else ""))
            params[name] = arg["value"]
    if _CONV_OUT.match(op):
        return _conv_output(tensors, params)
    if op == "linear" and len(tensors) >= 2 and len(tensors[1]) == 2 and tensors[0] and tensors[0][-1] == tensors[1][1]:
        dims = [*tensors[0][:-1], tensors[1][0]]
        return _labelled("NM" if len(dims) == 2 else "", dims)
    return ""


def _args(fields: dict[str, object]) -> tuple[str, str, str]:
    """(data types, input shapes, output shape) of a {'mod','op','args'} marker's tensor arguments, the shapes in
    DLProf's labelled form."""
    dtypes: list[str] = []
    shapes: list[str] = []
    args = fields.get("args")
    args = args if isinstance(args, list) else []
    op = str(fields.get("op", ""))
    for arg in args:
        if isinstance(arg, dict) and "shape" in arg:
            shapes.append(labelled_shape(op, len(shapes), arg["shape"]))
            if arg.get("dtype"):
                dtypes.append(str(arg["dtype"]))
    return ",".join(dict.fromkeys(dtypes)), "; ".join(shapes), output_shape(op, args)


def classify_name(name: str, has_suffix: bool, has_seq: bool = False) -> dict[str, object]:
    """Kind and op fields of one distinct marker name.

    `has_suffix`: some range of the name carried emit_nvtx's ``seq``/``op_id``/``sizes``; `has_seq`:
    some carried an autograd sequence number (only ops that record one do: a forward op).
    """
    row: dict[str, object] = {"kind": USER, "op_name": name, "op_type": name, "direction": "", "stack": "",
                              "data_types": "", "input_shapes": "", "output_shapes": "", "stack_named": False}
    if name.startswith("{"):
        fields = _dict_fields(name)
        if fields is None:
            return row
        if "traceMarker" in fields or "funcStack" in fields:
            stack = fields.get("funcStack")
            trace = fields.get("traceMarker")
            lines = [str(t) for t in trace] if isinstance(trace, list) else []
            if stack:
                op_name = stack_name(str(stack))
                op_type = op_name.rstrip("/").rsplit("/", 1)[-1]
            else:  # PyProf writes the call stack only: the op is named by its {'mod','op'} marker
                op_name, op_type = (lines[-1] if lines else name), ""
            row.update(kind=TRACE, op_name=op_name, op_type=op_type, direction=FPROP, stack="\n".join(lines),
                       stack_named=bool(stack))
        elif "op" in fields:
            mod, op = str(fields.get("mod", "")), str(fields["op"])
            data_types, shapes, output = _args(fields)
            row.update(kind=MODOP, op_name=f"{mod}.{op}" if mod else op, op_type=op, direction=FPROP,
                       data_types=data_types, input_shapes=shapes, output_shapes=output)
        else:
            row.update(kind=IGNORE)
        return row
    if name.startswith(_ENGINE_PREFIX) or _IS_BACKWARD.search(name):
        node, op_type = backward_op(name)
        row.update(kind=BACKWARD, op_name=node, op_type=op_type, direction=BPROP)
    elif has_suffix or "::" in name:
        # Dispatcher ops carry a namespace (aten::, prim::) or, before PyTorch 1.5, an autograd seq
        # number; suffixed names with neither are record_function scopes such as
        # "Optimizer.step#SGD.step", of no known direction.
        row.update(kind=FORWARD, op_type=normalise_op(name),
                   direction=FPROP if "::" in name or has_seq else "")
    return row


@dataclass(frozen=True)
class Parsed:
    """Op fields per distinct NVTX range name: `names` row k describes the name whose id is ids[k]."""

    names: pd.DataFrame  # index: name code; kind, op_name, op_type, direction, stack, data_types, input_shapes,
    # output_shapes, stack_named
    ids: np.ndarray  # name id (nvtx["text_id"]) of each code, sorted
    dict_markers: bool = False  # the profile holds DLProf/PyProf dict markers ({'mod','op'} or traceMarker)

    def codes(self, text_ids: np.ndarray) -> np.ndarray:
        """Name code of each id (-1 for an id that is no range name)."""
        text_ids = np.asarray(text_ids)
        if len(self.ids) == 0:
            return np.full(len(text_ids), -1, dtype=np.int32)
        first = int(self.ids[0])
        if int(self.ids[-1]) - first + 1 == len(self.ids):  # the reader's ids are contiguous: no lookup
            code = text_ids.astype(np.int64) - first
            return np.where((code >= 0) & (code < len(self.ids)), code, -1).astype(np.int32)
        pos = np.minimum(np.searchsorted(self.ids, text_ids), len(self.ids) - 1)
        return np.where(self.ids[pos] == text_ids, pos, -1).astype(np.int32)


def parse_markers(strings: StringTable, nvtx_names: pd.DataFrame, seq_ids: np.ndarray | None = None) -> Parsed:
    """Op fields of the NVTX range names, decided once per distinct name.

    `nvtx_names` is the profile's table of range names (index: name id; ``emit``: some range of the
    name carried emit_nvtx's per-call details, which makes it an emit_nvtx name); `seq_ids` are the
    name ids of which some range carried an autograd ``seq`` number.
    """
    ids = nvtx_names.index.to_numpy(dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    suffixed = nvtx_names["emit"].to_numpy(dtype=bool)[order]
    with_seq = np.isin(ids, seq_ids) if seq_ids is not None else np.zeros(len(ids), dtype=bool)
    texts = [str(t) for t in strings.decode(ids).to_numpy()]
    rows = [classify_name(t, bool(f), bool(q)) for t, f, q in zip(texts, suffixed, with_seq, strict=True)]
    dict_markers = any(row["kind"] in (TRACE, MODOP) for row in rows)  # distinct names, as above
    if dict_markers:  # emit_nvtx op types as these profiles report them
        for row in rows:
            if row["kind"] == FORWARD:
                row["op_type"] = strip_namespace(str(row["op_name"]))
    names = pd.DataFrame(rows, index=pd.RangeIndex(len(ids)),
                         columns=["kind", "op_name", "op_type", "direction", "stack", "data_types", "input_shapes",
                                  "output_shapes", "stack_named"])
    names["kind"] = names["kind"].astype(np.int8)
    names["stack_named"] = names["stack_named"].astype(bool)
    return Parsed(names, ids, dict_markers)
