"""`RooflineCostModel`: price a forward from FLOPs, bytes and the hardware's peaks.

Per step, per tensor-parallel rank (tp divides linear FLOPs and weight bytes, attention heads,
KV heads while tp <= kv_heads, and the LM head, which is vocab-parallel):

    linear    = max(GEMM rows * linear FLOPs/token / linear rate, linear weight bytes / mem
                rate) + (GEMMs + elementwise kernels) * kernel latency (`sim.cost.roofline.latency`)
    attention = max(causal pairs * FLOPs/pair / attn rate, KV tokens read * KV bytes / mem rate)
                + layers * kernel latency
    lm_head   = max(LM-head rows * 2 * hidden * vocab / linear rate, LM-head bytes / mem rate)
    allreduce = 2 per layer (1 in a sparse layer under ep > 1, whose experts combine by the
                all-to-all) of rows * hidden * activation bytes, NCCL's alpha-beta model at
                the link rate (`sim.cost.roofline.latency`; a large one 2 (tp - 1) / tp bytes / rate)
    experts, alltoall = the routed experts and their dispatch/combine (`sim.cost.expert_cost`)
    overhead  = per_step + per_layer * layers

"linear" is the shared linear weights (`ModelShape.shared_linear_params`). MLA prices decode
steps absorbed and extend/mixed steps naive (kv_b per KV token; `sim.model.shape`). KV bytes
per token per rank come from `shared.config.kv_cache_layout` (MLA's latent is replicated on every
rank). A rate is peak * achieved efficiency. Linear layers and experts run at the weight
dtype's peak (nvfp4 at the fp4 peak, its weights at 0.5625 bytes; fp8 weights on hardware
without fp8 units, and int4 weights, run weight-only at the bf16 rate); attention runs on
bf16 activations (fp32 for fp32 weights). Padding rows
count as decode rows with seq_len 1 (see BatchShape). GEMM rows are the rows in whole 64-row
tiles (`sim.cost.kernel.gemm_time.gemm_rows`), the kernel model's smallest, without its waves. Activation
traffic and KV writes are not priced.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.cost.base import BoundSplit, CostModel, StepCost, bounds_of, split_max, sum_splits
from sim.cost.batch_shape import BatchShape
from sim.cost.expert_cost import ExpertCost, expert_cost
from sim.cost.extend_steps import ExtendSteps, StepTotals, flatten, segment_sums
from sim.cost.kernel.gemm_time import gemm_rows
from sim.cost.roofline.latency import AllReduces, KernelLatency, kernel_latency
from sim.cost.roofline.overheads import Overheads
from sim.hardware.hardware import PEAK_FIELD, Efficiencies, Hardware
from sim.hardware.precision import DTYPE_BYTES, WEIGHT_ONLY_DTYPES
from sim.model.parallelism import (
    check_ep,
    check_tp,
    kv_bytes_per_token_per_rank,
)
from sim.model.shape import ModelShape
from sim.model.sliding_window import window_savings


class _Rates(NamedTuple):
    """Per-unit seconds, fixed for one model, hardware and tp (precomputed once)."""

    linear_per_row: float            # decode (MLA absorbed)
    linear_weights: float
    latency: KernelLatency
    attention_per_pair: float        # decode (MLA absorbed)
    attention_per_kv_token: float
    naive_linear_per_row: float      # extend (MLA naive; = linear_per_row without MLA)
    naive_attention_per_pair: float
    kv_up_per_kv_token: float        # extend: MLA's kv_b per KV token (0 without MLA)
    lm_head_per_row: float
    lm_head_weights: float
    allreduces: AllReduces
    overhead: float


@dataclass(frozen=True)
class RooflineCostModel(CostModel):
    model_shape: ModelShape
    hardware: Hardware
    tp: int = 1
    efficiencies: Efficiencies | None = None   # None: the hardware entry's defaults
    overheads: Overheads | None = None         # None: Overheads() (OVERHEAD_SOURCE)
    ep_size: int = 1                           # expert parallelism (divides tp)
    expert_zipf: float = 0.0                   # Zipf exponent of expert popularity (0: uniform)
    _rates: _Rates = field(init=False, repr=False, compare=False)
    _experts: ExpertCost | None = field(init=False, repr=False, compare=False)
    _expert_terms_memo: dict[int, tuple[float, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tp(self.tp, self.model_shape)
        check_ep(self.ep_size, self.tp, self.model_shape)
        for name, value in self.effective_efficiencies._asdict().items():
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"efficiency {name} must be in (0, 1], got {value!r}")
        # NOTE: a cache of derived constants (the model is frozen), so step_cost is arithmetic.
        object.__setattr__(self, "_rates", self._derive_rates())
        object.__setattr__(self, "_experts", expert_cost(
            self.model_shape, self.tp, self.ep_size, self.expert_zipf,
            self._group_rate("experts"), self._memory_rate(), self._link_rate(),
            DTYPE_BYTES[self.activation_dtype]))

    def _derive_rates(self) -> _Rates:
        m, tp, over = self.model_shape, self.tp, self.effective_overheads
        memory, compute = self._memory_rate(), self._group_rate("attention")
        linear, naive = self._linear_per_row(compute)
        attn_peak = self.hardware.peak_flops(self.activation_dtype) or self.hardware.flops_bf16
        attn = self._compute_rate(attn_peak)
        row_bytes = m.hidden_size * DTYPE_BYTES[self.activation_dtype]
        allreduces = 2 * m.num_layers - (m.num_sparse_layers if self.ep_size > 1 else 0)
        return _Rates(
            linear, m.linear_weight_bytes / tp / memory,
            kernel_latency(m, tp),
            m.attention_flops_per_pair / tp / attn,
            kv_bytes_per_token_per_rank(m, tp) / memory,
            naive,
            m.naive_attention_flops_per_pair / tp / attn,
            m.kv_up_flops_per_kv_token / tp / compute,
            m.lm_head_flops_per_row / tp / self._group_rate("lm_head"),
            m.lm_head_weight_bytes / tp / memory,
            AllReduces(allreduces, row_bytes, tp, self._link_rate()),
            over.per_step + over.per_layer * m.num_layers)

    def _linear_per_row(self, compute: float) -> tuple[float, float]:
        """Seconds per row of the shared linear layers (decode; naive MLA's extend), each
        weight group at its dtype's rate (`compute`: the attention projections')."""
        m, tp = self.model_shape, self.tp
        others = (("router", m.router_params), ("mlp", m.mlp_params))
        if all(self._group_rate(g) == compute for g, _ in others):
            return (m.linear_flops_per_token / tp / compute,
                    m.naive_linear_flops_per_token / tp / compute)
        rest = sum(2 * p / tp / self._group_rate(g) for g, p in others)
        attention = m.linear_flops_per_token - 2 * (m.router_params + m.mlp_params)
        return (attention / tp / compute + rest,
                (attention - m.kv_up_flops_per_kv_token) / tp / compute + rest)

    @property
    def effective_efficiencies(self) -> Efficiencies:
        return self.efficiencies or self.hardware.efficiencies

    @property
    def effective_overheads(self) -> Overheads:
        return self.overheads or Overheads()

    @property
    def linear_peak(self) -> float:
        """Peak FLOP/s the quantized linear layers run at (the model's weight dtype)."""
        return self.peak_for(self.model_shape.weight_dtype)

    def _group_rate(self, group: str) -> float:
        """The compute rate of a weight group's GEMMs (its dtype's peak, `peak_for`)."""
        return self._compute_rate(self.peak_for(self.model_shape.module_dtype(group)))

    def peak_for(self, dtype: str) -> float:
        """Peak FLOP/s of GEMMs over weights of `dtype`."""
        hw = self.hardware
        if dtype in WEIGHT_ONLY_DTYPES:
            return hw.flops_bf16  # dequantised to bf16 in the GEMM
        peak = hw.peak_flops(dtype)
        if peak is None and dtype == "fp8":
            return hw.flops_bf16  # weight-only fp8: dequantised to bf16 in the GEMM
        if peak is None:
            raise ValueError(f"{hw.key} has no {dtype} peak in the catalogue "
                             f"({hw.source(PEAK_FIELD[dtype])}); add one in a hardware JSON file")
        return peak

    @property
    def activation_dtype(self) -> str:
        return "fp32" if self.model_shape.weight_dtype == "fp32" else "bf16"

    def describe(self) -> str:
        m, ep = self.model_shape, f", ep={self.ep_size}" if self.ep_size > 1 else ""
        dtype = "" if m.weight_dtype == "bf16" else f", {m.weight_dtype}"
        return f"roofline({m.name}, {self.hardware.key}, tp={self.tp}{ep}{dtype})"

    def step_cost(self, shape: BatchShape) -> StepCost:
        if shape.rows == 0:
            return StepCost(overhead=self.effective_overheads.per_step)
        experts, alltoall = self.expert_times(shape.rows)
        return StepCost(
            linear=self.linear_time(shape), attention=self.attention_time(shape),
            lm_head=self.lm_head_time(shape), allreduce=self.allreduce_time(shape),
            experts=experts, alltoall=alltoall, overhead=self._rates.overhead)

    def step_split(self, shape: BatchShape) -> BoundSplit:
        """step_cost's parts by bound: each max(compute, memory) part on its larger side."""
        if shape.rows == 0:
            return BoundSplit(cpu=self.effective_overheads.per_step)
        return sum_splits(self._rows_split(shape),
                          split_max(*self._attention_terms(shape), self.attention_time(shape)))

    def decode_step_bounds(self, seq_lens: Sequence[Sequence[int]], padded: Sequence[int],
                           overlap: bool = False) -> list[str]:
        """decode_step_bound over arrays of the steps (`_bounds_of_totals`): a decode step's
        attention pairs are its KV tokens, its LM-head rows its padded rows. NOTE: with
        sliding-window layers, step by step (the base class's)."""
        if self.model_shape.sliding_layers:
            return super().decode_step_bounds(seq_lens, padded, overlap)
        b = np.fromiter(map(len, seq_lens), np.int64, len(seq_lens))        # [N]
        rows = np.asarray(padded, dtype=np.int64)
        kv = segment_sums(flatten(seq_lens), b) + rows - b   # NOTE: padding rows read one key each
        return self._bounds_of_totals(StepTotals(rows, kv, kv, rows), False, overlap)

    def extend_step_bounds(self, steps: ExtendSteps, overlap: bool = False) -> list[str]:
        """step_bound of many extend steps over arrays of their totals (`_bounds_of_totals`);
        with sliding-window layers step by step."""
        if self.model_shape.sliding_layers:
            return super().extend_step_bounds(steps, overlap)
        return self._bounds_of_totals(steps.totals(), True, overlap)

    def _bounds_of_totals(self, t: StepTotals, extend: bool, overlap: bool) -> list[str]:
        """The bounds step_split names for N steps of one kind, over [N] arrays: each part's
        (compute, memory) seconds, the parts summed in step_split's order (the same floats)."""
        r, lm_rows = self._rates, t.lm_head_rows
        gemm = gemm_rows(t.rows)
        linear_c = (gemm * r.naive_linear_per_row + t.kv_tokens * r.kv_up_per_kv_token
                    if extend and r.kv_up_per_kv_token else gemm * r.linear_per_row)
        per_pair = r.naive_attention_per_pair if extend else r.attention_per_pair
        experts = self._expert_row_terms(t.rows)                              # [N, 3]
        allreduce = r.allreduces.seconds_over(t.rows)
        parts = ((linear_c, np.full(len(t.rows), r.linear_weights),
                  r.latency.naive_linear if extend else r.latency.linear),
                 (lm_rows * r.lm_head_per_row, np.where(lm_rows > 0, r.lm_head_weights, 0.0), 0.0),
                 (experts[:, 0], experts[:, 1], 0.0),
                 (t.attention_pairs * per_pair, t.kv_tokens * r.attention_per_kv_token,
                  r.latency.attention))
        compute, memory = np.zeros(len(t.rows)), np.zeros(len(t.rows))
        for c, m, latency in parts:   # NOTE: split_max(c, m, max(c, m) + latency)'s floats
            compute = compute + np.where(c > m, c + latency, 0.0)
            memory = memory + np.where(c > m, 0.0, m + latency)
        empty = t.rows == 0   # NOTE: a step of no rows is priced as its per-step overhead alone
        return bounds_of(np.where(empty, 0.0, compute), np.where(empty, 0.0, memory),
                         np.where(empty, 0.0, allreduce + experts[:, 2]),
                         np.where(empty, self.effective_overheads.per_step, r.overhead), overlap)

    def _expert_row_terms(self, rows: np.ndarray) -> np.ndarray:
        """[N, 3] per step of `rows` rows: the routed experts' compute and memory seconds and
        the all-to-all's (zeros when dense; memoised by row count)."""
        if self._experts is None:
            return np.zeros((len(rows), 3))
        sizes, at = np.unique(rows, return_inverse=True)
        for n in sizes.tolist():
            if n not in self._expert_terms_memo:
                self._expert_terms_memo[n] = ((*self._expert_terms(n), self.expert_times(n)[1])
                                              if n else (0.0, 0.0, 0.0))
        return np.array([self._expert_terms_memo[n] for n in sizes.tolist()])[at]

    def _rows_split(self, shape: BatchShape) -> BoundSplit:
        """step_split but attention: linear, LM head, experts, collectives, overhead."""
        r, lm_rows = self._rates, shape.padded_lm_head_rows
        lm_head = (lm_rows * r.lm_head_per_row, r.lm_head_weights) if lm_rows else (0.0, 0.0)
        collectives = self.allreduce_time(shape) + self.expert_times(shape.rows)[1]
        return sum_splits(split_max(*self._linear_terms(shape), self.linear_time(shape)),
                          split_max(*lm_head),
                          split_max(*self._expert_terms(shape.rows)),
                          BoundSplit(communication=collectives, cpu=r.overhead))

    def _linear_terms(self, shape: BatchShape) -> tuple[float, float]:
        """(compute, memory) seconds of linear_time (its max, plus its kernel latency)."""
        r = self._rates
        if r.kv_up_per_kv_token == 0 or shape.forward_mode.is_decode_or_idle():
            return gemm_rows(shape.rows) * r.linear_per_row, r.linear_weights
        return (gemm_rows(shape.rows) * r.naive_linear_per_row
                + shape.kv_tokens * r.kv_up_per_kv_token, r.linear_weights)

    def _attention_terms(self, shape: BatchShape) -> tuple[float, float]:
        """(compute, memory) seconds of attention_time (its max, plus its kernel latency)."""
        r = self._rates
        per_pair = (r.attention_per_pair if shape.forward_mode.is_decode_or_idle()
                    else r.naive_attention_per_pair)
        pairs, kv = self._attention_work(shape)
        return pairs * per_pair, kv * r.attention_per_kv_token

    def _attention_work(self, shape: BatchShape) -> tuple[float, float]:
        """(query-key pairs, KV entries) of a layer, on average over the layers: the shape's,
        less the sliding-window layers' savings on their share (`sim.model.sliding_window`)."""
        m = self.model_shape
        if not m.sliding_layers:
            return shape.attention_pairs, shape.kv_tokens
        reads, pairs = window_savings(shape.prefix_lens, shape.extend_lens, m.sliding_window)
        share = m.sliding_layers / m.num_layers
        return shape.attention_pairs - share * pairs, shape.kv_tokens - share * reads

    def _expert_terms(self, rows: int) -> tuple[float, float]:
        """(compute, memory) seconds of the routed experts (ExpertCost.times' max)."""
        e = self._experts
        if e is None:
            return 0.0, 0.0
        load = e.routing.load(rows)
        return (e.sparse_layers * load.pairs * e.seconds_per_pair,
                e.sparse_layers * load.experts * e.seconds_per_expert)

    def expert_times(self, rows: int) -> tuple[float, float]:
        """(experts, alltoall) seconds of a step of `rows` token rows; zeros when dense."""
        return (0.0, 0.0) if self._experts is None else self._experts.times(rows)

    def decode_step_times(self, seq_lens: np.ndarray, padded_batch_size: int,
                          overlap: bool = False) -> Iterator[float]:
        """step_time(BatchShape.decode(seq_lens + j, padded), overlap) for j = 0, 1, ..., as
        the same float operations on the shape's totals (decode: attention pairs = KV tokens)."""
        if self.model_shape.sliding_layers:   # NOTE: windows: step by step (the base class's)
            yield from super().decode_step_times(seq_lens, padded_batch_size, overlap)
        r, rows, b = self._rates, padded_batch_size, len(seq_lens)
        linear = max(gemm_rows(rows) * r.linear_per_row, r.linear_weights) + r.latency.linear
        lm_head = self.lm_head_time_rows(rows)
        allreduce = r.allreduces.seconds(rows)
        experts, alltoall = self.expert_times(rows)
        kv = int(np.add.reduce(seq_lens)) + rows - b   # padding rows read one key each
        while True:
            attention = max(kv * r.attention_per_pair, kv * r.attention_per_kv_token) \
                + r.latency.attention
            if overlap:
                yield max(float(sum((linear, attention, lm_head, allreduce, experts, alltoall))),
                          r.overhead)
            else:
                yield float(sum((linear, attention, lm_head, allreduce, experts, alltoall,
                                 r.overhead)))
            kv += b

    def _compute_rate(self, peak: float) -> float:
        return peak * self.effective_efficiencies.compute

    def _memory_rate(self) -> float:
        return self.hardware.mem_bw * self.effective_efficiencies.memory

    def _link_rate(self) -> float:
        return self.hardware.interconnect_bw * self.effective_efficiencies.interconnect

    def linear_time(self, shape: BatchShape) -> float:
        r = self._rates
        # NOTE: without MLA (kv_up 0) a decode's and an extend's GEMMs are the same kernels.
        return max(*self._linear_terms(shape)) + (
            r.latency.linear if r.kv_up_per_kv_token == 0 or shape.forward_mode.is_decode_or_idle()
            else r.latency.naive_linear)

    def attention_time(self, shape: BatchShape) -> float:
        r = self._rates
        per_pair = (r.attention_per_pair if shape.forward_mode.is_decode_or_idle()
                    else r.naive_attention_per_pair)
        pairs, kv = self._attention_work(shape)
        return max(pairs * per_pair, kv * r.attention_per_kv_token) + r.latency.attention

    def lm_head_time(self, shape: BatchShape) -> float:
        return self.lm_head_time_rows(shape.padded_lm_head_rows)

    def lm_head_time_rows(self, rows: int) -> float:
        r = self._rates
        return 0.0 if rows == 0 else max(rows * r.lm_head_per_row, r.lm_head_weights)

    def allreduce_time(self, shape: BatchShape) -> float:
        """Two all-reduces per layer of a [rows, hidden] activation (`AllReduces`)."""
        return 0.0 if self.tp == 1 else self._rates.allreduces.seconds(shape.rows)
