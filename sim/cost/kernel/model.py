"""`KernelCostModel`: price a forward kernel by kernel, from shapes, on one of tp GPUs.

- linear: every projection is a GEMM at its own shape (`sim.model.layer_gemms`), timed with tile
  and wave quantization against the chip's achievable matmul rate, or its weight and
  activation traffic, plus a kernel latency (`sim.cost.kernel.gemm_time`); the elementwise kernels of a
  layer (fused residual-add norms, rotary, the gated activation) move their rows' bytes
  (`sim.cost.kernel.elementwise_traffic`), and the step's new tokens' keys and values are written to
  the cache once.
- attention: decode reads each request's KV (bytes / memory rate) or computes its pairs,
  plus a fixed time per (request, KV head) unit of its thread blocks, spread over the SMs;
  extends run FlashAttention at the chip's attention fraction of peak, one thread block per
  (query tile of 128 rows, head) doing its rows' causal pairs, on the SMs: the longest tile,
  and the waves of the SMs, bound it below (`sim.cost.kernel.prefill_attention`).
- lm_head: the pruned rows' GEMM against the vocabulary shard, then the logits all-gather.
- allreduce: two per layer (one in a sparse layer under ep > 1), NCCL's alpha-beta model.
- experts / alltoall: a sparse layer's routed experts as one grouped GEMM over the distinct
  experts on the busiest EP rank (`sim.cost.expert_routing`), and the dispatch and combine.
- overhead (CPU): the engine's scheduling per step and per request (`sim.cost.engine_profile`:
  SGLang's by default; a decode step pays its share of a multi-step pass), and the launch of
  the forward: one CUDA graph replay for decode batches up to `cuda_graph_max_bs`, else each
  kernel launched eagerly; launches overlap the device, so only the launch time beyond it is
  added.
- attention data parallelism (`attention_dp` ranks): attention on one rank's share of the
  batch at tp / attention_dp, the MLP and experts on the whole batch (`sim.cost.kernel.forward_kernels`);
  SGLang's wide-EP options (DeepEP all-to-all, data-parallel dense layers and LM head,
  two-batch overlap): `sim.model.ep_options`, priced across nodes by the chip's network
  (`Hardware.network`); the all-to-all left exposed by two-batch overlap: `sim.cost.kernel.two_batch_overlap`.

Step time = device + overhead, or under the overlap schedule max(device, overhead)
(`StepCost.time`). Chip constants: the chip's `Hardware.kernels` (`sim.hardware.chip_kernels`;
a roofline-only chip, without them, is refused when the model is built); the rest:
`sim.cost.kernel.params`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from shared.config.engine_config import DEFAULT_CUDA_GRAPH_MAX_BS
from sim.cost.base import BoundSplit, CostModel, StepCost, bounds_of, sum_splits
from sim.cost.batch_shape import BatchShape
from sim.cost.engine_profile import EngineProfile, get_engine_profile
from sim.cost.extend_steps import flatten, segment_sums
from sim.cost.kernel.attention_ranks import busiest_rank_rows
from sim.cost.kernel.forward_kernels import ForwardKernels, chip_kernels
from sim.cost.kernel.params import KernelParams
from sim.hardware.hardware import Hardware
from sim.model.ep_options import EPOptions
from sim.model.parallelism import check_attention_dp, check_ep
from sim.model.shape import ModelShape
from sim.model.sliding_window import window_savings


@dataclass(frozen=True)
class KernelCostModel(CostModel):
    model_shape: ModelShape
    hardware: Hardware
    tp: int = 1
    ep_size: int = 1
    expert_zipf: float = 0.0
    params: KernelParams = field(default_factory=KernelParams)
    cuda_graph_max_bs: int = DEFAULT_CUDA_GRAPH_MAX_BS
    attention_dp: int = 1      # attention data-parallel ranks (SGLang --enable-dp-attention)
    ep_options: EPOptions = field(default_factory=EPOptions)   # DeepEP, dense DP, TBO
    engine: EngineProfile = field(default_factory=lambda: get_engine_profile(None))
    _kernels: ForwardKernels = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        chip_kernels(self.hardware)
        check_attention_dp(self.attention_dp, self.tp, self.model_shape)
        check_ep(self.ep_size, self.tp, self.model_shape)
        self.ep_options.check(self.attention_dp, self.tp)
        object.__setattr__(self, "_kernels", ForwardKernels(
            self.model_shape, self.hardware, self.params, self.tp, self.ep_size,
            self.expert_zipf, self.attention_dp, self.ep_options,
            fp8_attention=self.engine.fp8_attention, fp4_moe_gather=self.engine.fp4_moe_gather))

    def describe(self) -> str:
        m, ep = self.model_shape, f", ep={self.ep_size}" if self.ep_size > 1 else ""
        dtype = "" if m.weight_dtype == "bf16" else f", {m.weight_dtype}"
        dp = f", dp_attention={self.attention_dp}" if self.attention_dp > 1 else ""
        return f"kernel({m.name}, {self.hardware.key}, tp={self.tp}{ep}{dp}{dtype})"

    def step_cost(self, shape: BatchShape) -> StepCost:
        if shape.rows == 0:
            return StepCost(overhead=self.engine.cpu_time(0, False))
        k, decode = self._kernels, shape.forward_mode.is_decode_or_idle()
        rank, share = self._busiest_rank(shape, decode)
        fixed = k.fixed(shape.rows, shape.padded_lm_head_rows, decode, rank)
        linear = fixed.linear + (0.0 if decode else sum(k.kv_up(shape.kv_tokens, share)))
        scale, kv = self._attention_work(shape)
        attention = (k.decode_attention(kv, shape.rows) if decode
                     else k.extend_attention(shape.prefix_lens, shape.extend_lens, kv, share,
                                             scale))
        cost = StepCost(linear=linear, attention=attention, lm_head=fixed.lm_head,
                        allreduce=fixed.allreduce, experts=fixed.experts,
                        alltoall=k.step_alltoall(fixed, linear + attention, decode))
        return cost._replace(overhead=self._overhead(shape.batch_size, shape.rows, decode,
                                                     cost.device))

    def step_split(self, shape: BatchShape) -> BoundSplit:
        """step_cost's seconds by bound, kernel by kernel (`FixedParts.split` and the
        attention kernels' own)."""
        cost = self.step_cost(shape)
        if shape.rows == 0:
            return BoundSplit(cpu=cost.overhead)
        k, decode = self._kernels, shape.forward_mode.is_decode_or_idle()
        rank, share = self._busiest_rank(shape, decode)
        fixed = k.fixed(shape.rows, shape.padded_lm_head_rows, decode, rank).split
        alltoall = BoundSplit(communication=cost.alltoall)
        scale, kv = self._attention_work(shape)
        if decode:
            device = sum_splits(fixed, alltoall, k.decode_attention_split(kv, shape.rows))
        else:
            device = sum_splits(fixed, alltoall, k.kv_up(shape.kv_tokens, share),
                                k.extend_attention_split(shape.prefix_lens, shape.extend_lens,
                                                         kv, share, scale))
        return device._replace(cpu=cost.overhead)

    def _attention_work(self, shape: BatchShape) -> tuple[float, int | float]:
        """(the query-key pairs' share left, KV entries read) of a layer on average: all of
        them, less the sliding-window layers' savings on their share of the layers."""
        m = self.model_shape
        if not m.sliding_layers:
            return 1.0, shape.kv_tokens
        reads, pairs = window_savings(shape.prefix_lens, shape.extend_lens, m.sliding_window)
        share = m.sliding_layers / m.num_layers
        return 1.0 - share * pairs / shape.attention_pairs, shape.kv_tokens - share * reads

    def decode_step_bound(self, seq_lens: np.ndarray, padded_batch_size: int,
                          overlap: bool = False) -> str:
        """step_bound(BatchShape.decode(seq_lens, padded), overlap) from the KV total (the
        operations of decode_step_times for its overhead)."""
        b, rows, k = len(seq_lens), padded_batch_size, self._kernels
        if rows == 0 or self.model_shape.sliding_layers:
            return super().decode_step_bound(seq_lens, padded_batch_size, overlap)
        kv, fixed = int(np.add.reduce(seq_lens)) + rows - b, k.fixed(rows, rows, True)
        attention = k.decode_attention(kv, rows)
        alltoall = k.step_alltoall(fixed, fixed.linear + attention, True)
        device = (fixed.linear + attention + fixed.lm_head + fixed.allreduce
                  + fixed.experts + alltoall)
        split = sum_splits(fixed.split, BoundSplit(communication=alltoall),
                           k.decode_attention_split(kv, rows))
        return split._replace(cpu=self._overhead(b, rows, True, device)).bound(overlap)

    def decode_step_bounds(self, seq_lens: Sequence[Sequence[int]], padded: Sequence[int],
                           overlap: bool = False) -> list[str]:
        """decode_step_bound of each step, the steps of one (batch size, padded size)
        together over arrays of their KV totals (`_decode_group_bounds`); steps of no rows,
        and every step under two-batch overlap, one by one."""
        if self.ep_options.two_batch_overlap or self.model_shape.sliding_layers:
            # NOTE: two-batch overlap's exposed all-to-all, and windows, are per step
            return super().decode_step_bounds(seq_lens, padded, overlap)
        b = np.fromiter(map(len, seq_lens), np.int64, len(seq_lens))        # [N]
        rows = np.asarray(padded, dtype=np.int64)                             # [N]
        kv = segment_sums(flatten(seq_lens), b) + rows - b   # NOTE: padding rows read one key each
        bounds = np.empty(len(b), dtype=object)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, key in enumerate(zip(b.tolist(), rows.tolist(), strict=True)):
            groups.setdefault(key, []).append(i)
        alone = super().decode_step_bound
        for (size, r), where in groups.items():
            bounds[where] = (self._decode_group_bounds(kv[where], size, r, overlap) if r else
                             [alone(np.asarray(seq_lens[i], np.int64), r, overlap) for i in where])
        return bounds.tolist()

    def _decode_group_bounds(self, kv: np.ndarray, batch_size: int, rows: int,
                             overlap: bool) -> list[str]:
        """decode_step_bound of steps of one batch and padded size, from their [n] KV totals:
        decode_step_bound's float operations, term by term in its order, over arrays."""
        k = self._kernels
        fixed = k.fixed(rows, rows, True)
        compute, memory, attention = k.decode_attention_terms(kv, rows)           # [n] each
        device = (fixed.linear + attention + fixed.lm_head + fixed.allreduce
                  + fixed.experts + fixed.alltoall)
        on_compute = compute > memory                                             # split_max
        split = fixed.split
        cpu = self._overhead_terms(batch_size, rows, True)
        return bounds_of(split.compute + 0.0 + np.where(on_compute, attention, 0.0),
                         split.memory + 0.0 + np.where(on_compute, 0.0, attention),
                         np.full(len(kv), split.communication + fixed.alltoall + 0.0),
                         cpu[0] + np.maximum(0.0, cpu[1] - device), overlap)

    def decode_step_times(self, seq_lens: np.ndarray, padded_batch_size: int,
                          overlap: bool = False) -> Iterator[float]:
        """step_time(BatchShape.decode(seq_lens + j, padded), overlap), j = 0, 1, ...: the
        same float operations as step_cost, the fixed parts computed once."""
        b, rows = len(seq_lens), padded_batch_size
        if self.model_shape.sliding_layers:   # NOTE: windows: step by step (the base class's)
            yield from super().decode_step_times(seq_lens, padded_batch_size, overlap)
        if rows == 0:
            while True:
                yield self.engine.cpu_time(0, False)
        k = self._kernels
        fixed = k.fixed(rows, rows, True)
        kv = int(np.add.reduce(seq_lens)) + rows - b
        while True:
            # NOTE: StepCost.device's sum, term by term in its order, so the floats match.
            attention = k.decode_attention(kv, rows)
            device = (fixed.linear + attention + fixed.lm_head + fixed.allreduce
                      + fixed.experts + k.step_alltoall(fixed, fixed.linear + attention, True))
            overhead = self._overhead(b, rows, True, device)
            yield max(device, overhead) if overlap else device + overhead
            kv += b

    def _busiest_rank(self, shape: BatchShape, decode: bool) -> tuple[int | None, float | None]:
        """(rows, share of the batch's attention work) of the busiest attention-DP rank for
        an extend (`sim.cost.kernel.attention_ranks`); (None, None), an even split, for a decode batch or
        without attention DP."""
        if decode or self.attention_dp == 1 or shape.rows == 0:
            return None, None
        rank = busiest_rank_rows(shape.extend_lens, self.attention_dp)
        return rank, rank / max(1, int(np.add.reduce(shape.extend_lens)))

    def _overhead(self, batch_size: int, rows: int, decode: bool, device: float) -> float:
        scheduling, launch = self._overhead_terms(batch_size, rows, decode)
        return scheduling + max(0.0, launch - device)

    def _overhead_terms(self, batch_size: int, rows: int, decode: bool) -> tuple[float, float]:
        """(the engine's CPU time, the forward's launch time) of a step; the launch overlaps
        the device, so the overhead is the first plus what the second leaves exposed."""
        # NOTE: under attention DP each rank's scheduler runs its share of the batch, all
        # ranks at once; a rank's CUDA graph covers its own rows.
        p, k = self.params, self._kernels
        graph = decode and k.rank_rows(rows) <= self.cuda_graph_max_bs
        launch = p.graph_replay if graph else p.launch_per_kernel * k.kernel_count
        requests = batch_size if self.attention_dp == 1 else k.rank_rows(batch_size)
        return self.engine.cpu_time(requests, decode), launch
