"""`ForwardKernels`: the kernel cost model's per-model arithmetic (one model, chip, tp, ep):
the seconds of each kind of kernel a forward runs, as functions of the step's rows, KV
tokens and extend lengths. The parts that depend on the row counts only are memoised
(`fixed`), so a simulated step costs a dictionary lookup and the attention terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from sim.chip_kernels import ChipKernels
from sim.collectives import allgather_time, allreduce_time, alltoall_time
from sim.expert_routing import ExpertRouting
from sim.gemm_time import GemmChip, gemm_time
from sim.hardware import Hardware
from sim.kernel_params import KernelParams
from sim.layer_gemms import Gemm, forward_gemms
from sim.model_shape import ModelShape
from sim.parallelism import kv_bytes_per_token_per_rank
from sim.precision import WEIGHT_ONLY_DTYPES

QUERY_TILE = 128   # FlashAttention's query rows per thread block


class FixedParts(NamedTuple):
    """Seconds of the parts that depend on the row counts only."""

    linear: float
    lm_head: float
    allreduce: float
    experts: float
    alltoall: float


class ForwardKernels:
    def __init__(self, model: ModelShape, hardware: Hardware, chip: ChipKernels,
                 params: KernelParams, tp: int, ep_size: int, expert_zipf: float) -> None:
        self.model, self.chip, self.params, self.tp, self.ep_size = model, chip, params, tp, ep_size
        self._gemms = forward_gemms(model, tp)
        self._act = 4 if model.weight_dtype == "fp32" else 2   # activation bytes per value
        self._mem = hardware.mem_bw * params.memory_efficiency
        self._bus = hardware.interconnect_bw * hardware.interconnect_efficiency
        self._gemm_chip = GemmChip(chip.num_sms, self._linear_mamf(), self._mem,
                                   params.kernel_latency)
        self._kv_bytes = kv_bytes_per_token_per_rank(model, tp)
        self._attn_rate = hardware.flops_bf16 * chip.attention_fraction
        self._routing = None if model.moe is None else ExpertRouting(
            model.moe.num_experts, model.moe.experts_per_token, ep_size, expert_zipf)
        self.kernel_count = self._kernel_count()   # launched per eager step
        # NOTE: memo of fixed(); the parts depend on (rows, lm_rows, decode) only.
        self._memo: dict[tuple[int, int, bool], FixedParts] = {}

    def _linear_mamf(self) -> float:
        """GEMMs run at the weight dtype's MAMF; fp8 without fp8 units and int4 weights are
        dequantised and run at bf16's."""
        dtype = self.model.weight_dtype
        if dtype in WEIGHT_ONLY_DTYPES or self.chip.mamf(dtype) is None:
            return self.chip.mamf_bf16
        return self.chip.mamf(dtype)

    def _kernel_count(self) -> int:
        """Kernels one forward launches (GEMMs, attention, elementwise, collectives, head)."""
        m, g = self.model, self._gemms
        gemms = sum(x.count for x in g.rows + g.decode_rows)
        per_layer = 1 + self.params.elementwise_kernels + (2 if self.tp > 1 else 0)
        return gemms + m.num_layers * per_layer + 2

    def fixed(self, rows: int, lm_rows: int, decode: bool) -> FixedParts:
        key = (rows, lm_rows, decode)
        parts = self._memo.get(key)
        if parts is None:
            parts = self._fixed(rows, lm_rows, decode)
            self._memo[key] = parts
        return parts

    def _fixed(self, rows: int, lm_rows: int, decode: bool) -> FixedParts:
        g = self._gemms
        linear = self._gemms_time(g.rows + (g.decode_rows if decode else ()), rows)
        experts, alltoall = self._experts(rows)
        return FixedParts(linear + self._elementwise(rows), self._lm_head(lm_rows),
                          self._allreduce(rows), experts, alltoall)

    def _gemms_time(self, gemms: Sequence[Gemm], m: float) -> float:
        wb, chip = self.model.weight_bytes_per_param, self._gemm_chip
        return sum(g.count * gemm_time(chip, m, g.n, g.k, wb, self._act).total for g in gemms)

    def _elementwise(self, rows: int) -> float:
        per_kernel = self.params.kernel_latency + 2 * rows * self.model.hidden_size * self._act / self._mem
        return self.model.num_layers * self.params.elementwise_kernels * per_kernel

    def _lm_head(self, rows: int) -> float:
        if rows == 0:
            return 0.0
        m = self.model
        head = gemm_time(self._gemm_chip, rows, m.vocab_size // self.tp, m.hidden_size,
                         m.weight_bytes_per_param, self._act).total
        return head + allgather_time(rows * m.vocab_size * self._act, self.tp, self._bus).total

    def _allreduce(self, rows: int) -> float:
        m = self.model
        count = 2 * m.num_layers - (m.num_sparse_layers if self.ep_size > 1 else 0)
        return count * allreduce_time(rows * m.hidden_size * self._act, self.tp, self._bus).total

    def _experts(self, rows: int) -> tuple[float, float]:
        """(routed experts, all-to-all) seconds over the sparse layers, busiest EP rank."""
        if self._routing is None:
            return 0.0, 0.0
        m, load = self.model, self._routing.load(rows)
        if load.experts <= 0:
            return 0.0, 0.0
        width, per_expert = m.moe.expert_intermediate_size // (self.tp // self.ep_size), load.pairs / load.experts
        gemms = (Gemm("experts_gate_up", 2 * width, m.hidden_size, 1),
                 Gemm("experts_down", m.hidden_size, width, 1))
        wb, chip = m.weight_bytes_per_param, self._gemm_chip
        experts = sum(gemm_time(chip, per_expert, g.n, g.k, wb, self._act, load.experts).total
                      for g in gemms)
        remote = load.pairs * (self.ep_size - 1) / self.ep_size * m.hidden_size * self._act
        alltoall = 2 * alltoall_time(remote, self.ep_size, self._bus).total
        return m.num_sparse_layers * experts, m.num_sparse_layers * alltoall

    def kv_up(self, kv_tokens: int) -> float:
        """Naive MLA's kv_b over every KV token an extend reads; 0 without MLA."""
        return self._gemms_time(self._gemms.extend_kv, kv_tokens) if self._gemms.extend_kv else 0.0

    def decode_attention(self, kv_tokens: int) -> float:
        """One query per request: read the KV (or compute the pairs, MLA's absorbed heads)."""
        m = self.model
        read = kv_tokens * self._kv_bytes / self._mem
        compute = kv_tokens * m.attention_flops_per_pair / self.tp / self._attn_rate
        return max(read, compute) + m.num_layers * self.params.kernel_latency

    def extend_attention(self, extend_lens: Sequence[int], pairs: int, kv_tokens: int) -> float:
        """FlashAttention over query tiles of QUERY_TILE rows per head, in waves of the SMs."""
        m = self.model
        heads = m.num_heads // self.tp
        units = heads * sum(-(-e // QUERY_TILE) for e in extend_lens)
        filled = units / (math.ceil(units / self.chip.num_sms) * self.chip.num_sms)
        compute = pairs * m.naive_attention_flops_per_pair / self.tp / (self._attn_rate * filled)
        read = kv_tokens * self._kv_bytes / self._mem
        return max(compute, read) + m.num_layers * self.params.kernel_latency
