"""What every report builder and detector reads about one rank: its profile, iterations and options,
plus the frames derived from them, each computed once, when first asked for.

Contract: ``RankContext(profile, iterations, options, rank=None)``. The derived frames form a small
graph, computed lazily because a run asks only for some reports (``--reports=kernel`` needs no time
partition):

    work          <- profile                       GPU work with its launching API call (timeline.correlate)
                     + iterations as detected      and its iteration (by launch)
    iterations    <- iterations as detected, work  each iteration ending with the GPU work launched in it
                                                   when that ends later (timeline.iterations.with_gpu_work)
    selected_work <- work                          the aggregated iterations' rows
    roofline      <- options.ncu_report, work      the ncu kernels' roofline, matched to this rank's kernels
                                                   (dlagg.roofline); None without --ncu_report or when the
                                                   ncu report belongs to another rank (options.ncu_rank)
    uses_tc       <- profile, roofline             Tensor Core use per kernel name: measured by ncu where a
                                                   launch of that name was, else guessed from it (classify)
    breakdown     <- profile, iterations, work, uses_tc   per-iteration time partition (timeline.breakdown)
    ops           <- profile, iterations, work, uses_tc   op instances and ops (dlagg.ops)
    op_instances  <- ops, iterations               the aggregated iterations' op calls, op columns joined

Nothing here formats anything: reports turn these frames into figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

import numpy as np
import pandas as pd

from .classify import uses_tensor_cores
from .model import Iterations, Profile, categorical, factorize_ids, rows_where
from .ops import Ops, find_ops
from .ops.cache import OpsCache, digest_of
from .options import Options
from .reader.schema import PID_MASK
from .roofline import KernelMatch, Roofline, analyse, measured_tc
from .timeline import intervals
from .timeline.breakdown import time_breakdown
from .timeline.correlate import contains, gpu_work, packed_keys
from .timeline.iterations import with_gpu_work

# Host calls that wait for the GPU (runtime and driver API, without nsys' _vNNNN suffix);
# cudaThreadSynchronize is the old name of cudaDeviceSynchronize.
SYNC_CALL = r"cu(?:da)?(?:Device|Ctx|Stream|Event|Thread)Synchroni[sz]e"
# Copies without "Async" return only when the copy is done.
BLOCKING_COPY_CALL = r"cudaMemcpy(?:2D|3D|Peer)?(?:ToSymbol|FromSymbol)?|cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D|Peer)?(?:_v2)?"
# ENUM_CUPTI_SYNC_TYPE values where the host waits: 1 event sync, 3 stream sync, 4 context
# sync (2, stream-wait-event, is a GPU-side wait that does not block the host).
HOST_BLOCKING_SYNC_TYPES = (1, 3, 4)
# Calls that only make a stream wait on the GPU. nsys 2022.4 labels their CUPTI records as
# stream syncs (type 3) in our recordings, so they are excluded by name.
GPU_SIDE_WAIT = r"cu(?:da)?StreamWaitEvent"

# Op text figures -> op table column (one value per op) or instance column.
OP_TEXT = {"op_id": "op_id", "op_name": "op_name", "direction": "direction", "op_type": "op_type",
           "data_types": "data_types", "op_key": "op_key"}


class RankContext:
    """One rank's profile, iterations and options, and the frames derived from them (computed once).

    `iterations` are the detected ones (``timeline.iterations.detect_iterations``); ``ctx.iterations``
    are the same with GPU-side ends (``model.Iterations``), which every report uses.
    """

    def __init__(self, profile: Profile, iterations: Iterations, options: Options, rank: int | None = None,
                 ops_cache: OpsCache | None = None) -> None:
        self.profile = profile
        self.detected = iterations
        self.options = options
        self.rank = rank  # this rank's number in its job (None: not known, as in a one-rank run)
        self.ops_cache = ops_cache  # where the ops found are kept for the next run on the file (None: nowhere)

    @cached_property
    def work(self) -> pd.DataFrame:
        """All GPU work with launching API call and iteration (see timeline.correlate)."""
        work = gpu_work(self.profile)
        return work.assign(iteration=self.detected.assign(work["t_attr"].to_numpy()))

    @cached_property
    def iterations(self) -> Iterations:
        """The iterations, each ending no earlier than the GPU work launched in it."""
        work = self.work
        return with_gpu_work(self.detected, work["iteration"].to_numpy(), work["end"].to_numpy())

    @cached_property
    def selected_work(self) -> pd.DataFrame:
        """GPU work attributed to the aggregated iterations."""
        work = self.work
        return rows_where(work, self.iterations.in_selection(work["iteration"].to_numpy()))

    @property
    def has_roofline(self) -> bool:
        """Whether this rank has the ncu report: --ncu_report was given and it belongs to this rank
        (--ncu_rank; a context whose rank is not known takes it)."""
        o = self.options
        return o.ncu_report is not None and (o.ncu_rank is None or self.rank is None or self.rank == o.ncu_rank)

    @cached_property
    def _roofline(self) -> tuple[Roofline, KernelMatch] | None:
        ncu_report = self.options.ncu_report
        if ncu_report is None or not self.has_roofline:
            return None
        roof, match = analyse(ncu_report, profile=self.profile, iterations=self.iterations, peaks=self.options.peaks,
                              gpu_work=self.work)
        assert match is not None  # with a profile there is a match
        return roof, match

    @property
    def roofline(self) -> Roofline | None:
        """The roofline of the ncu report's kernels (rates from their matched nsys times); None
        without the ncu report on this rank."""
        return self._roofline[0] if self._roofline else None

    @property
    def roofline_match(self) -> KernelMatch | None:
        """How the ncu report's kernels matched this rank's kernels (None without the ncu report)."""
        return self._roofline[1] if self._roofline else None

    @cached_property
    def _uses_tc_by_name(self) -> pd.Series:
        """Tensor Core use per kernel-name id as the names say (decided once per distinct name)."""
        ids = np.unique(self.profile.kernels["name_id"].to_numpy())
        names = self.profile.strings.decode(pd.Series(ids))
        return pd.Series(uses_tensor_cores(names).to_numpy(), index=ids)

    @cached_property
    def _short_by_id(self) -> pd.Series:
        """Kernel short-name id per demangled-name id (the demangled id itself when the export has no short name)."""
        kernels = self.profile.kernels.drop_duplicates("name_id")
        short = kernels["short_name_id"].to_numpy()
        named = np.where(short >= 0, short, kernels["name_id"].to_numpy())
        return pd.Series(named, index=kernels["name_id"].to_numpy())

    def short_name_ids(self, name_ids: np.ndarray) -> np.ndarray:
        """The short-name id of each kernel (demangled-name id): a kernel's identity, as DLProf's (one
        ``fft2d_r2c_32x32`` however many template instances it has); -1 for unknown ids."""
        return self._short_by_id.reindex(np.asarray(name_ids)).fillna(-1).to_numpy(dtype=np.int64)

    @cached_property
    def _uses_tc_by_id(self) -> pd.Series:
        """Tensor Core use per kernel-name id: ncu's measurement where it has one, else the name's."""
        by_name = self._uses_tc_by_name
        if self._roofline is None:
            return by_name
        measured = measured_tc(*self._roofline, self.profile.kernels["name_id"].to_numpy())
        out = by_name.copy()
        out[measured.index] = measured.to_numpy()
        return out

    def uses_tc(self, name_ids: np.ndarray) -> np.ndarray:
        """Boolean per kernel-name id: the kernel runs on Tensor Cores (False for unknown ids, e.g. -1
        of memory operations). Measured by ncu where the rank has the ncu report and a launch of the
        name was profiled, else guessed from the name."""
        return self._uses_tc_by_id.reindex(np.asarray(name_ids)).fillna(False).to_numpy(dtype=bool)

    def uses_tc_by_name(self, name_ids: np.ndarray) -> np.ndarray:
        """As `uses_tc`, from the kernel names alone (what dlagg guesses without ncu data)."""
        return self._uses_tc_by_name.reindex(np.asarray(name_ids)).fillna(False).to_numpy(dtype=bool)

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        """Per-iteration partition of wall-clock time (see timeline.breakdown)."""
        return time_breakdown(self.profile, self.iterations, self.work, self.uses_tc)

    @cached_property
    def ops(self) -> Ops:
        """Op instances from NVTX, the ops they group into, and the op of each `work` row (see dlagg.ops); from the
        cache when a run on the same file found them for the same inputs (`ops_inputs`)."""
        def found() -> Ops:
            return find_ops(self.profile, self.iterations, self.work, self.uses_tc, self.options.domains)

        return found() if self.ops_cache is None else self.ops_cache.ops(self.ops_inputs(), found)

    def ops_inputs(self) -> str:
        """A digest of what the op search reads besides the profile: the iteration windows (not which of them are
        aggregated), the domains and each kernel's Tensor Core use (which ncu may have measured)."""
        its, detected = self.iterations, self.detected
        ends = [a for a in (its.key_ends, its.gpu_ends) if a is not None]
        tc = self._uses_tc_by_id
        return digest_of(its.key_node, its.found, list(its.candidates), its.starts, its.ends, len(ends), *ends,
                         detected.starts, detected.launch_ends, list(self.options.domains), len(self.work),
                         tc.index.to_numpy(), tc.to_numpy(dtype=bool))

    @cached_property
    def op_instances(self) -> pd.DataFrame:
        """Op instances of the aggregated iterations (by the op's start), with op columns joined."""
        ops = self.ops
        inst = ops.instances
        inst = rows_where(inst, self.iterations.in_selection(inst["iteration"].to_numpy()))
        return inst.join(ops.ops, on="key")

    def op_columns(self, work_index: pd.Index, columns: Iterable[str] = OP_TEXT) -> dict[str, pd.Categorical]:
        """op_id, op_name, direction, op_type, data_types of the op that launched each of these `work`
        rows, as categorical columns ('' where no op is known)."""
        ops = self.ops
        instance = ops.work_instance[self.work.index.get_indexer(work_index)]
        has = instance >= 0
        key = np.full(len(instance), -1, dtype=np.int64)
        key[has] = ops.instances["key"].to_numpy()[instance[has]]
        out = {}
        for column in columns:
            source = OP_TEXT[column]
            if source in ops.ops:  # one value per op
                out[column] = categorical(key, ops.ops[source].to_numpy(dtype=object))
            else:  # per instance: already categorical
                values = ops.instances[source].array
                codes = np.append(np.asarray(values.codes), -1)[instance]  # instance -1: no op
                out[column] = categorical(codes, np.asarray(values.categories, dtype=object))
        return out

    @cached_property
    def runtime_names(self) -> pd.Series:
        """Runtime/driver API name per name id, without nsys' version suffix (``_v3020``)."""
        ids = np.unique(self.profile.runtime["name_id"].to_numpy())
        names = self.profile.strings.decode(pd.Series(ids)).str.replace(r"_v\d+$", "", regex=True)
        return pd.Series(names.to_numpy(), index=ids)

    def runtime_ids_matching(self, pattern: str) -> np.ndarray:
        names = self.runtime_names
        return names.index[names.str.fullmatch(pattern).to_numpy(dtype=bool)].to_numpy()

    @cached_property
    def blocking_calls(self) -> pd.DataFrame:
        """Runtime/driver calls in which the host waited for the GPU, on threads that launch GPU work:
        synchronising calls and blocking copies by name, and any call with a CUPTI synchronisation
        record of a host-blocking type."""
        runtime = self.profile.runtime
        ids = np.concatenate((self.runtime_ids_matching(SYNC_CALL), self.runtime_ids_matching(BLOCKING_COPY_CALL)))
        blocking = np.isin(runtime["name_id"].to_numpy(), ids)
        sync = self.profile.sync
        waits = sync[np.isin(sync["sync_type"].to_numpy(), HOST_BLOCKING_SYNC_TYPES)]
        pid = runtime["global_tid"].to_numpy() & PID_MASK
        wait_keys, call_keys = packed_keys(waits["global_pid"].to_numpy(), waits["correlation_id"].to_numpy(),
                                           pid, runtime["correlation_id"].to_numpy())
        waited = contains(np.unique(wait_keys), call_keys)
        blocking |= waited & ~np.isin(runtime["name_id"].to_numpy(), self.runtime_ids_matching(GPU_SIDE_WAIT))
        launchers = np.unique(self.work["api_tid"].to_numpy())
        blocking &= np.isin(runtime["global_tid"].to_numpy(), launchers)
        return runtime[blocking]

    def host_blocked_per_window(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Time (ns) in each window (starts[i], ends[i]] that some launching thread spent in a host-blocking call
        (the union over threads: time the host waited for the GPU)."""
        calls = self.blocking_calls
        return intervals.overlap_per_window(calls["start"].to_numpy(), calls["end"].to_numpy(), starts, ends)

    def output_shapes(self, work_index: pd.Index) -> pd.Categorical:
        """Output shapes of the op instance that launched each of these `work` rows ('' when unknown): those
        a dict marker's arguments determine (ops/markers.py ``output_shape``); emit_nvtx records none."""
        instance = self.ops.work_instance[self.work.index.get_indexer(work_index)]
        own = self.ops.instances["output_shapes"].array
        return categorical(np.append(np.asarray(own.codes), -1)[instance], np.asarray(own.categories, dtype=object))

    def input_shapes(self, work_index: pd.Index) -> pd.Categorical:
        """Input shapes of the op instance that launched each of these `work` rows ('' when unknown).

        Dict markers carry them in the op's marker; emit_nvtx ranges in their text, which is read
        now, for these instances only (``Profile.nvtx_details``).
        """
        ops = self.ops
        instance = ops.work_instance[self.work.index.get_indexer(work_index)]
        own = ops.instances["input_shapes"].array  # categorical, from dict markers
        codes = np.append(np.asarray(own.codes), -1)  # per instance; last slot: no op
        texts = np.asarray(own.categories, dtype=object)
        wanted = factorize_ids(instance[instance >= 0])[0]
        wanted = wanted[ops.instances["emit"].to_numpy()[wanted]]
        if len(wanted) and self.profile.nvtx_details is not None:
            read = self.profile.nvtx_details.input_shapes(ops.instances["nvtx_row"].to_numpy()[wanted])
            codes[wanted] = len(texts) + np.asarray(read.codes)
            texts = np.concatenate((texts, np.asarray(read.categories, dtype=object)))
        return categorical(codes[instance], texts)
