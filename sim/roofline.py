"""`RooflineCostModel`: price a forward from FLOPs, bytes and the hardware's peaks, and
`kv_capacity_tokens`: how many KV tokens fit beside the weights.

Per step, per tensor-parallel rank (tp divides linear FLOPs and weight bytes, attention heads,
KV heads while tp <= kv_heads, and the LM head, which is vocab-parallel):

    linear    = max(rows * linear FLOPs/token / linear rate, linear weight bytes / mem rate)
    attention = max(causal pairs * 4 * layers * q_dim / attn rate, KV tokens read * KV bytes / mem rate)
    lm_head   = max(LM-head rows * 2 * hidden * vocab / linear rate, LM-head bytes / mem rate)
    allreduce = 2 per layer, ring: 2 (tp - 1) / tp * rows * hidden * activation bytes / link rate
    overhead  = per_step + per_layer * layers

A rate is peak * achieved efficiency. Linear layers run at the weight dtype's peak (fp8
weights on hardware without fp8 units run weight-only at the bf16 rate); attention runs on
bf16 activations (fp32 for fp32 weights). Padding rows count as decode rows with seq_len 1
(see BatchShape). Activation traffic and KV writes are not priced.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.batch_shape import BatchShape
from sim.cost_model import CostModel, StepCost
from sim.hardware import Efficiencies, Hardware
from sim.model_shapes import DTYPE_BYTES, ModelShape

OVERHEAD_SOURCE = ("BLIS: ~126 us per step + 32 us per layer of CPU/launch overhead "
                   "(reference/simulators.md §9)")
DEFAULT_RESERVE_FRACTION = 0.1


@dataclass(frozen=True)
class Overheads:
    """Fixed seconds per step and per decoder layer (defaults: OVERHEAD_SOURCE)."""

    per_step: float = 126e-6
    per_layer: float = 32e-6

    def __post_init__(self) -> None:
        for name in ("per_step", "per_layer"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Overheads.{name} must be a finite number >= 0, got {value!r}")


def check_tp(tp: int, model: ModelShape) -> None:
    """tp must be a positive int dividing the attention heads, and divide or be a multiple of
    the KV heads (KV heads are replicated when tp > kv_heads)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if model.num_heads % tp:
        raise ValueError(f"tp={tp} does not divide {model.name}'s {model.num_heads} attention heads")
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ValueError(f"tp={tp} neither divides nor is a multiple of {model.name}'s "
                         f"{model.num_kv_heads} KV heads")


def kv_bytes_per_token_per_rank(model: ModelShape, tp: int) -> float:
    """KV bytes one token takes on one rank (whole KV heads; replicated when tp > kv_heads)."""
    return model.kv_bytes_per_token * math.ceil(model.num_kv_heads / tp) / model.num_kv_heads


class _Rates(NamedTuple):
    """Per-unit seconds, fixed for one model, hardware and tp (precomputed once)."""

    linear_per_row: float
    linear_weights: float
    attention_per_pair: float
    attention_per_kv_token: float
    lm_head_per_row: float
    lm_head_weights: float
    allreduce_per_row: float
    overhead: float


@dataclass(frozen=True)
class RooflineCostModel(CostModel):
    model_shape: ModelShape
    hardware: Hardware
    tp: int = 1
    efficiencies: Efficiencies | None = None   # None: the hardware entry's defaults
    overheads: Overheads | None = None         # None: Overheads() (OVERHEAD_SOURCE)
    _rates: _Rates = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tp(self.tp, self.model_shape)
        for name, value in self.effective_efficiencies._asdict().items():
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"efficiency {name} must be in (0, 1], got {value!r}")
        # NOTE: a cache of derived constants (the model is frozen), so step_cost is arithmetic.
        object.__setattr__(self, "_rates", self._derive_rates())

    def _derive_rates(self) -> _Rates:
        m, tp, over = self.model_shape, self.tp, self.effective_overheads
        compute, memory = self._compute_rate(self.linear_peak), self._memory_rate()
        attn_peak = self.hardware.peak_flops(self.activation_dtype) or self.hardware.flops_bf16
        link = self.hardware.interconnect_bw * self.effective_efficiencies.interconnect
        ring_per_row = 2 * (tp - 1) / tp * m.hidden_size * DTYPE_BYTES[self.activation_dtype]
        return _Rates(
            m.linear_flops_per_token / tp / compute, m.linear_weight_bytes / tp / memory,
            m.attention_flops_per_pair / tp / self._compute_rate(attn_peak),
            kv_bytes_per_token_per_rank(m, tp) / memory,
            m.lm_head_flops_per_row / tp / compute, m.lm_head_weight_bytes / tp / memory,
            2 * m.num_layers * ring_per_row / link,
            over.per_step + over.per_layer * m.num_layers)

    @property
    def effective_efficiencies(self) -> Efficiencies:
        return self.efficiencies or self.hardware.efficiencies

    @property
    def effective_overheads(self) -> Overheads:
        return self.overheads or Overheads()

    @property
    def linear_peak(self) -> float:
        """Peak FLOP/s the linear layers run at for the model's weight dtype."""
        dtype, hw = self.model_shape.weight_dtype, self.hardware
        peak = hw.peak_flops(dtype)
        if peak is None and dtype == "fp8":
            return hw.flops_bf16  # weight-only fp8: dequantised to bf16 in the GEMM
        if peak is None:
            raise ValueError(f"{hw.key} has no {dtype} peak in the catalogue "
                             f"({hw.source('flops_' + dtype)}); add one in a hardware JSON file")
        return peak

    @property
    def activation_dtype(self) -> str:
        return "fp32" if self.model_shape.weight_dtype == "fp32" else "bf16"

    def step_cost(self, shape: BatchShape) -> StepCost:
        if shape.rows == 0:
            return StepCost(overhead=self.effective_overheads.per_step)
        return StepCost(
            linear=self.linear_time(shape), attention=self.attention_time(shape),
            lm_head=self.lm_head_time(shape), allreduce=self.allreduce_time(shape),
            overhead=self._rates.overhead)

    def decode_step_times(self, seq_lens: np.ndarray, padded_batch_size: int,
                          overlap: bool = False) -> Iterator[float]:
        """step_time(BatchShape.decode(seq_lens + j, padded), overlap) for j = 0, 1, ..., as
        the same float operations on the shape's totals (decode: attention pairs = KV tokens)."""
        r, rows, b = self._rates, padded_batch_size, len(seq_lens)
        linear, lm_head = max(rows * r.linear_per_row, r.linear_weights), self.lm_head_time_rows(rows)
        allreduce = 0.0 if self.tp == 1 else rows * r.allreduce_per_row
        kv = int(np.add.reduce(seq_lens)) + rows - b   # padding rows read one key each
        while True:
            attention = max(kv * r.attention_per_pair, kv * r.attention_per_kv_token)
            if overlap:
                yield max(float(sum((linear, attention, lm_head, allreduce))), r.overhead)
            else:
                yield float(sum((linear, attention, lm_head, allreduce, r.overhead)))
            kv += b

    def _compute_rate(self, peak: float) -> float:
        return peak * self.effective_efficiencies.compute

    def _memory_rate(self) -> float:
        return self.hardware.mem_bw * self.effective_efficiencies.memory

    def linear_time(self, shape: BatchShape) -> float:
        r = self._rates
        return max(shape.rows * r.linear_per_row, r.linear_weights)

    def attention_time(self, shape: BatchShape) -> float:
        r = self._rates
        return max(shape.attention_pairs * r.attention_per_pair, shape.kv_tokens * r.attention_per_kv_token)

    def lm_head_time(self, shape: BatchShape) -> float:
        return self.lm_head_time_rows(shape.padded_lm_head_rows)

    def lm_head_time_rows(self, rows: int) -> float:
        r = self._rates
        return 0.0 if rows == 0 else max(rows * r.lm_head_per_row, r.lm_head_weights)

    def allreduce_time(self, shape: BatchShape) -> float:
        """Two ring all-reduces per layer of a [rows, hidden] activation."""
        return 0.0 if self.tp == 1 else shape.rows * self._rates.allreduce_per_row


def kv_capacity_tokens(model_shape: ModelShape, hardware: Hardware, tp: int = 1,
                       max_total_tokens: int | None = None,
                       reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> int:
    """KV tokens the engine can hold. A real run's `max_total_tokens`, when given, always
    wins. Else per rank: (capacity * (1 - reserve_fraction) - weights / tp) / KV bytes per
    token per rank, i.e. (capacity * tp - weights - reserve) / KV bytes per token when tp
    divides the KV heads. `reserve_fraction` of memory is kept for activations, CUDA graphs
    and the allocator (an assumption; import the real value when you have a run)."""
    if max_total_tokens is not None:
        if isinstance(max_total_tokens, bool) or not isinstance(max_total_tokens, int) \
                or max_total_tokens < 1:
            raise ValueError(f"max_total_tokens must be a positive integer, got {max_total_tokens!r}")
        return max_total_tokens
    check_tp(tp, model_shape)
    if not 0 <= reserve_fraction < 1:
        raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction!r}")
    free = hardware.mem_capacity * (1 - reserve_fraction) - model_shape.weight_bytes / tp
    tokens = int(free // kv_bytes_per_token_per_rank(model_shape, tp))
    if tokens < 1:
        raise ValueError(
            f"{model_shape.name} ({model_shape.weight_dtype}) does not fit on {tp}x {hardware.key}: "
            f"{model_shape.weight_bytes / tp / 1e9:.1f} GB of weights per rank vs "
            f"{hardware.mem_capacity * (1 - reserve_fraction) / 1e9:.1f} GB usable")
    return tokens
