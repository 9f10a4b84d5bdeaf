"""`ForwardKernels`: the kernel cost model's per-model arithmetic (one model, chip, tp, ep):
the seconds of each kind of kernel a forward runs, as functions of the step's rows, KV
tokens and extend lengths. The parts that depend on the row counts only are memoised
(`fixed`), so a simulated step costs a dictionary lookup and the attention terms. The
row parts include the KV store of the step's new tokens (`kv_write`).

Under attention data parallelism (`attention_dp` d > 1) each request runs on one attention
rank and the step waits for the busiest (`sim.cost.kernel.attention_ranks`: ceil(rows / d) rows for a
decode batch, a lone prefill's every token): attention projections and kernels run on that
rank's rows (and its proportional share of the KV tokens and pairs) at the attention tp
(tp / d), then the MLP and the experts run on all rows over all tp GPUs (the gathered
batch); the attention output is all-reduced within an attention rank, the MLP's input
gathered and its output scattered over tp (priced as one all-reduce of the whole batch;
where the engine gathers an NVFP4 MoE's input already quantized, `fp4_moe_gather`, as a
16-bit reduce-scatter and an NVFP4 all-gather), in every layer: with the batch gathered,
a sparse layer's experts need no all-to-all (SGLang's and TRT-LLM's attention DP without
DeepEP).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sim.cost.base import BoundSplit, split_max, sum_splits
from sim.cost.expert_routing import ExpertRouting
from sim.cost.kernel.elementwise_traffic import elementwise_row_bytes
from sim.cost.kernel.gemm_time import GemmChip, GemmTime, gemm_time
from sim.cost.kernel.params import KernelParams
from sim.cost.kernel.prefill_attention import query_tile_pairs, tiled_makespan
from sim.cost.kernel.two_batch_overlap import DEEPEP_NORMAL_SMS, exposed_alltoall
from sim.hardware.chip_kernels import ChipKernels
from sim.hardware.cluster_network import NORMAL_A2A_FRACTION, deepep_time
from sim.hardware.collectives import (
    allgather_time,
    allreduce_time,
    alltoall_time,
    scatter_gather_time,
)
from sim.hardware.hardware import Hardware
from sim.hardware.precision import WEIGHT_DTYPE_BYTES, WEIGHT_ONLY_DTYPES
from sim.model.ep_options import EPOptions
from sim.model.layer_gemms import Gemm, forward_gemms
from sim.model.parallelism import kv_bytes_per_token_per_rank
from sim.model.shape import ModelShape
from sim.model.weight_formats import MODULE_GROUPS, gemm_group

NVFP4_VALUE_BYTES = WEIGHT_DTYPE_BYTES["nvfp4"]   # a 4-bit value and its share of the scales
MOE_EXTRA_KERNELS = 4   # per sparse layer: top-k routing, permute, activation, combine


class FixedParts(NamedTuple):
    """Seconds of the parts that depend on the row counts only, and the same seconds by
    what bounds each kernel (`split`: a GEMM counts whole on its larger side, elementwise
    kernels as memory, all-reduces as communication; the all-to-all, whose exposed part
    depends on the step's attention under two-batch overlap, is left out of it)."""

    linear: float
    lm_head: float
    allreduce: float
    experts: float
    alltoall: float
    split: BoundSplit


def chip_kernels(hardware: Hardware) -> ChipKernels:
    """The chip's kernel-model constants (`Hardware.kernels`); ValueError naming the chip
    where its entry is roofline-only."""
    if hardware.kernels is None:
        raise ValueError(f"hardware {hardware.key!r} is roofline-only: its entry has no kernel "
                         f"constants (SMs, matmul rates, attention fraction) for the kernel cost "
                         f"model; use the roofline cost model, or give the entry a 'kernels' "
                         f"section")
    return hardware.kernels


class ForwardKernels:
    def __init__(self, model: ModelShape, hardware: Hardware, params: KernelParams, tp: int,
                 ep_size: int, expert_zipf: float, attention_dp: int = 1,
                 ep_options: EPOptions | None = None, fp8_attention: bool = False,
                 fp4_moe_gather: bool = False) -> None:
        """The chip's constants and network come from `hardware` (`kernels`, `network`);
        `fp8_attention`, `fp4_moe_gather`: the engine's kernel choices
        (`sim.cost.engine_profile.EngineProfile`)."""
        self.chip = chip = chip_kernels(hardware)
        self.model, self.params, self.tp, self.ep_size = model, params, tp, ep_size
        self.dp, self._atp = attention_dp, tp // attention_dp
        self.opts = ep_options = ep_options or EPOptions()
        self._gemms = forward_gemms(model, tp, self._atp)
        # NOTE: moe_dense_tp_size 1: the dense MLPs, shared experts and router unsharded.
        self._dense_dp = forward_gemms(model, 1).rows if ep_options.dense_tp_size == 1 else None
        self._net = hardware.network
        self._act = 4 if model.weight_dtype == "fp32" else 2   # activation bytes per value
        self._mem = hardware.mem_bw * params.memory_efficiency
        self._bus = hardware.interconnect_bw * hardware.interconnect_efficiency
        # NOTE: one GEMM chip per weight group's dtype (`sim.model.weight_formats`)
        self._chips = {g: GemmChip(chip.num_sms, self._linear_mamf(model.module_dtype(g)),
                                   self._mem, params.kernel_latency) for g in MODULE_GROUPS}
        self._expert_chip = GemmChip(chip.num_sms, params.expert_compute_efficiency
                                     * self._linear_mamf(model.module_dtype("experts")),
                                     hardware.mem_bw * params.expert_memory_efficiency,
                                     params.kernel_latency)
        self._kv_bytes = kv_bytes_per_token_per_rank(model, self._atp)
        mlp_tp = 1 if self._dense_dp is not None else tp
        self._elementwise_bytes = elementwise_row_bytes(model, self._atp, mlp_tp, self._act)
        self._attn_rate = hardware.flops_bf16 * chip.attention_fraction
        self._heads = model.num_heads // self._atp   # an extend's CTAs per query tile
        # NOTE: one SM runs 1 / num_sms of the attention rate: its seconds per (query, key)
        # pair of one head, every layer.
        self._sm_pair_seconds = (model.naive_attention_flops_per_pair / model.num_heads
                                 * chip.num_sms / self._attn_rate)
        self._decode_rate = self._decode_attention_rate(hardware, fp8_attention)
        self._fp4_gathered = model.num_sparse_layers if fp4_moe_gather \
            and model.weight_dtype == "nvfp4" and ep_options.a2a_backend != "deepep" else 0
        self._routing = None if model.moe is None else ExpertRouting(
            model.moe.num_experts, model.moe.experts_per_token, ep_size, expert_zipf)
        heads = 1 if model.mla is not None else max(1, model.num_kv_heads // self._atp)
        # NOTE: one request's decode units over every layer, spread over the SMs.
        self._unit_seconds = model.num_layers * heads * params.attention_unit_latency / chip.num_sms
        self.kernel_count = self._kernel_count()   # launched per eager step
        # NOTE: memo of fixed(); the parts depend on (rows, lm_rows, decode) only.
        self._memo: dict[tuple[int, int, bool], FixedParts] = {}

    def _linear_mamf(self, dtype: str) -> float:
        """GEMMs run at their weights' dtype's MAMF (nvfp4: the fp4 MAMF); fp8 without fp8
        units and int4 / mxfp4 weights are dequantised and run at bf16's."""
        if dtype in WEIGHT_ONLY_DTYPES or self.chip.mamf(dtype) is None:
            return self.chip.mamf_bf16
        return self.chip.mamf(dtype)

    def _decode_attention_rate(self, hardware: Hardware, fp8_attention: bool) -> float:
        """Decode attention's FLOP/s: the 16-bit rate, or, where the engine runs it on fp8
        tensor cores over an fp8 KV cache, the same fraction of the fp8 peak."""
        if fp8_attention and self.model.kv_dtype == "fp8" and hardware.flops_fp8:
            return hardware.flops_fp8 * self.chip.attention_fraction
        return self._attn_rate

    def _kernel_count(self) -> int:
        """Kernels one forward launches (GEMMs, attention, elementwise, collectives, head)."""
        m, g = self.model, self._gemms
        gemms = sum(x.count for x in g.attention + g.rows + g.decode_rows)
        per_layer = 1 + self.params.elementwise_kernels + (2 if self.tp > 1 else 0)
        return gemms + m.num_layers * per_layer + 2

    def fixed(self, rows: int, lm_rows: int, decode: bool, rank_rows: int | None = None
              ) -> FixedParts:
        """The row-count parts of a step of `rows` rows (`rank_rows` on the busiest attention
        rank; None: an even split, `rank_rows(rows)`)."""
        rank = self.rank_rows(rows) if rank_rows is None else rank_rows
        key = (rows, lm_rows, decode, rank)
        parts = self._memo.get(key)
        if parts is None:
            parts = self._fixed(rows, lm_rows, decode, rank)
            self._memo[key] = parts
        return parts

    def _fixed(self, rows: int, lm_rows: int, decode: bool, rank: int) -> FixedParts:
        if self.opts.two_batch_overlap and rows > 1:
            return self._micro_batches(rows, lm_rows, decode, rank)
        return self._one_batch(rows, lm_rows, decode, rank)

    def _micro_batches(self, rows: int, lm_rows: int, decode: bool, rank: int) -> FixedParts:
        """Two-batch overlap: the layers run twice on half the rows each (every GEMM reads
        its weights once per micro-batch), the LM head once on the whole batch."""
        half = self._one_batch(-(-rows // 2), 0, decode, -(-rank // 2))
        head = self._lm_head(lm_rows)
        return FixedParts(2 * half.linear, sum(head), 2 * half.allreduce, 2 * half.experts,
                          2 * half.alltoall, sum_splits(half.split, half.split, head))

    def _one_batch(self, rows: int, lm_rows: int, decode: bool, rank: int) -> FixedParts:
        g = self._gemms
        absorbed = g.decode_rows if decode else ()
        if self.dp == 1:
            linear = self._gemms_split(g.attention + g.rows + absorbed, rows)
        elif self._dense_dp is not None:
            linear = self._gemms_split(g.attention + absorbed + self._dense_dp, rank)
        else:
            linear = sum_splits(self._gemms_split(g.attention + absorbed, rank),
                                self._gemms_split(g.rows, rows))
        # NOTE: norms, rotary and the KV store on the busiest attention rank's rows, the gated
        # activation on the rows the MLP runs.
        mlp_rows = rank if self._dense_dp is not None else rows
        linear = sum_splits(linear, BoundSplit(memory=self._elementwise(rank, mlp_rows)
                                               + self.kv_write(rank)))
        experts, alltoall = self._experts(rows, decode, rank)
        lm_head, allreduce = self._lm_head(lm_rows), self._allreduce(rows, rank)
        split = sum_splits(linear, lm_head, experts, BoundSplit(communication=allreduce))
        return FixedParts(sum(linear), sum(lm_head), allreduce, sum(experts), alltoall, split)

    def step_alltoall(self, fixed: FixedParts, attention_side: float, decode: bool) -> float:
        """The step's all-to-all seconds: all of `fixed.alltoall`, or under two-batch overlap
        what the other micro-batch's compute (`attention_side`: the step's linear and
        attention seconds; and the experts) leaves exposed (`sim.cost.kernel.two_batch_overlap`)."""
        if not self.opts.two_batch_overlap or fixed.alltoall == 0:
            return fixed.alltoall
        sms = 0.0 if decode else DEEPEP_NORMAL_SMS / self.chip.num_sms
        return exposed_alltoall(attention_side, fixed.experts, fixed.alltoall, sms)

    def _gemms_split(self, gemms: Sequence[Gemm], m: float) -> BoundSplit:
        """The GEMMs over m rows, each at its weight group's bytes and chip."""
        model, parts = self.model, []
        for g in gemms:
            group = gemm_group(g.name)
            parts.append(_gemm_split(gemm_time(self._chips[group], m, g.n, g.k,
                                               model.module_bytes_per_param(group), self._act),
                                     g.count))
        return sum_splits(*parts)

    def kv_write(self, rows: int) -> float:
        """Seconds to store `rows` new tokens' keys and values (every layer, this rank's KV
        heads) in the cache: their bytes at the streaming memory rate. NOTE: no kernel
        latency of its own; engines fuse the store into attention or rotary (TRT-LLM) or
        launch it apart (SGLang's set_kv_buffer), and the split is not modelled."""
        return rows * self._kv_bytes / self._mem

    def _elementwise(self, rank_rows: int, mlp_rows: int) -> float:
        """The layers' memory-bound elementwise kernels (`elementwise_row_bytes`): norms and
        rotary on the busiest attention rank's rows, the dense MLPs' gated activation on the
        rows the MLP runs (all of them when gathered under attention DP)."""
        launches = self.model.num_layers * self.params.elementwise_kernels * self.params.kernel_latency
        attention, mlp = self._elementwise_bytes
        return launches + (rank_rows * attention + mlp_rows * mlp) / self._mem

    def _lm_head(self, rows: int) -> BoundSplit:
        if rows == 0:
            return BoundSplit()
        m = self.model
        if self.opts.dp_lm_head:   # one attention rank's rows, the whole vocabulary
            return _gemm_split(gemm_time(self._chips["lm_head"], self.rank_rows(rows),
                                         m.vocab_size, m.hidden_size,
                                         m.module_bytes_per_param("lm_head"), self._act))
        head = gemm_time(self._chips["lm_head"], rows, m.vocab_size // self.tp, m.hidden_size,
                         m.module_bytes_per_param("lm_head"), self._act)
        gather = allgather_time(rows * m.vocab_size * self._act, self.tp, self._bus_over(self.tp))
        return sum_splits(_gemm_split(head), BoundSplit(communication=gather.total))

    def rank_rows(self, rows: int) -> int:
        """One attention rank's share of a step's rows (all of them without attention DP)."""
        return -(-rows // self.dp)

    def _allreduce(self, rows: int, rank: int) -> float:
        """Per layer: attention's output over the attention tp, the MLP's over tp (none in a
        sparse layer under ep > 1, whose experts combine by the all-to-all; under attention
        DP with `fp4_moe_gather`, a sparse layer's as a bf16 reduce-scatter and an NVFP4
        all-gather)."""
        m, row_bytes = self.model, self.model.hidden_size * self._act
        if self.dp == 1:
            mlp = m.num_layers - (m.num_sparse_layers if self.ep_size > 1 else 0)
            return (m.num_layers + mlp) * allreduce_time(rows * row_bytes, self.tp,
                                                         self._bus_over(self.tp)).total
        mlp, bus = self._gathered_layers() - self._fp4_gathered, self._bus_over(self.tp)
        attention = allreduce_time(rank * row_bytes, self._atp, self._bus_over(self._atp)).total
        gathered = allreduce_time(rows * row_bytes, self.tp, bus).total
        fp4 = scatter_gather_time(rows * row_bytes, rows * m.hidden_size * NVFP4_VALUE_BYTES,
                                  self.tp, bus)
        return m.num_layers * attention + mlp * gathered + self._fp4_gathered * fp4

    def _gathered_layers(self) -> int:
        """Layers whose MLP input is gathered over tp (attention DP): the dense ones unless
        they run data-parallel, the sparse ones unless DeepEP dispatches their tokens."""
        m = self.model
        dense = 0 if self._dense_dp is not None else m.num_layers - m.num_sparse_layers
        return dense + (0 if self.opts.a2a_backend == "deepep" else m.num_sparse_layers)

    def _bus_over(self, ranks: int) -> float:
        """Per-GPU bandwidth of a collective over `ranks` GPUs: NVLink inside a node, the
        GPU's network card across nodes (the chip's `Hardware.network`)."""
        if ranks <= self._net.gpus_per_node:
            return self._bus
        return self._net.nic_bw * NORMAL_A2A_FRACTION

    def _experts(self, rows: int, decode: bool, rank: int) -> tuple[BoundSplit, float]:
        """(routed experts by bound, all-to-all seconds) over the sparse layers, busiest EP
        rank (dispatching the busiest attention rank's `rank` rows)."""
        if self._routing is None:
            return BoundSplit(), 0.0
        m, load = self.model, self._routing.load(rows)
        if load.experts <= 0:
            return BoundSplit(), 0.0
        width, per_expert = m.moe.expert_intermediate_size // (self.tp // self.ep_size), load.pairs / load.experts
        wb, chip, layers = m.module_bytes_per_param("experts"), self._expert_chip, m.num_sparse_layers
        experts = sum_splits(*(_gemm_split(gemm_time(chip, per_expert, n, k, wb, self._act,
                                                     load.experts), layers)
                               for n, k in ((2 * width, m.hidden_size), (m.hidden_size, width))),
                             BoundSplit(memory=layers * self._moe_traffic(load.pairs, width)))
        if self.opts.a2a_backend == "deepep":
            a2a = deepep_time(rank, m.moe.experts_per_token, m.hidden_size,
                              self.ep_size, self._net, self._bus, low_latency=decode)
            return experts, layers * a2a
        if self.dp > 1:   # the MLP's gather already gave every rank every row
            return experts, 0.0
        remote = load.pairs * (self.ep_size - 1) / self.ep_size * m.hidden_size * self._act
        return experts, layers * 2 * alltoall_time(remote, self.ep_size, self._bus).total

    def _moe_traffic(self, pairs: float, width: int) -> float:
        """A sparse layer's kernels around its expert GEMMs, on the busiest rank's pairs:
        the permute into expert order and the weighted combine back (each reads and writes
        a hidden row per pair) and the gated activation (reads 2 x width, writes width per
        pair), each a memory-bound kernel."""
        moved = pairs * self._act * (4 * self.model.hidden_size + 3 * width)
        return moved / self._mem + MOE_EXTRA_KERNELS * self.params.kernel_latency

    def kv_up(self, kv_tokens: int, share: float | None = None) -> BoundSplit:
        """Naive MLA's kv_b over every KV token an extend reads (the busiest attention
        rank's `share`; None: 1 / dp), by bound; nothing without MLA."""
        if not self._gemms.extend_kv:
            return BoundSplit()
        return self._gemms_split(self._gemms.extend_kv,
                                 kv_tokens * (1 / self.dp if share is None else share))

    def decode_attention(self, kv_tokens: int, rows: int = 0) -> float:
        """One query per request: read the KV (or compute the pairs, MLA's absorbed heads),
        an attention rank's share, plus each work unit's fixed time (`_decode_units`)."""
        m, kv = self.model, kv_tokens / self.dp
        read = kv * self._kv_bytes / self._mem
        compute = kv * m.attention_flops_per_pair / self._atp / self._decode_rate
        return max(read, compute) + self._decode_units(rows) + m.num_layers * self.params.kernel_latency

    def decode_attention_split(self, kv_tokens: int, rows: int = 0) -> BoundSplit:
        """decode_attention's seconds on its bound (compute or memory)."""
        m, kv = self.model, kv_tokens / self.dp
        compute = kv * m.attention_flops_per_pair / self._atp / self._decode_rate
        return split_max(compute, kv * self._kv_bytes / self._mem,
                         self.decode_attention(kv_tokens, rows))

    def decode_attention_terms(self, kv_tokens: np.ndarray, rows: int
                               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[N] (compute, memory, seconds) of decode_attention for N KV totals of steps of
        `rows` rows: the same float operations, over arrays."""
        m, kv = self.model, kv_tokens / self.dp
        read = kv * self._kv_bytes / self._mem
        compute = kv * m.attention_flops_per_pair / self._atp / self._decode_rate
        fixed = m.num_layers * self.params.kernel_latency
        return compute, read, np.maximum(read, compute) + self._decode_units(rows) + fixed

    def _decode_units(self, rows: int) -> float:
        """Seconds of the decode kernels' per-request work beyond the KV bytes: one unit per
        (request, KV head) of the busiest attention rank (the split-KV kernels' thread-block
        granularity; MLA's latent is one head), each `attention_unit_latency` of one SM,
        spread over the SMs, in every layer. NOTE: the page table's reads (4 bytes per page)
        are under 0.1% of the KV bytes at page size 1 and are not priced."""
        return self.rank_rows(rows) * self._unit_seconds

    def extend_attention(self, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                         kv_tokens: float, share: float | None = None,
                         pair_scale: float = 1.0) -> float:
        """FlashAttention over query tiles of QUERY_TILE rows per head, each tile's causal
        pairs, on the SMs (`sim.cost.kernel.prefill_attention`; the busiest attention rank's `share` of
        the tiles and KV; None: 1 / dp), `pair_scale` of the causal pairs scored (sliding-window
        layers score fewer: `KernelCostModel._attention_work`)."""
        return sum(self.extend_attention_split(prefix_lens, extend_lens, kv_tokens, share,
                                               pair_scale))

    def extend_attention_split(self, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                               kv_tokens: float, share: float | None = None,
                               pair_scale: float = 1.0) -> BoundSplit:
        """extend_attention's seconds on its bound (compute or memory)."""
        m, share = self.model, 1 / self.dp if share is None else share
        span = tiled_makespan(query_tile_pairs(prefix_lens, extend_lens),
                              self._heads * share, self.chip.num_sms)
        compute = span * self._sm_pair_seconds * pair_scale if pair_scale != 1.0 \
            else span * self._sm_pair_seconds
        read = kv_tokens * share * self._kv_bytes / self._mem
        return split_max(compute, read,
                         max(compute, read) + m.num_layers * self.params.kernel_latency)


def _gemm_split(t: GemmTime, count: float = 1) -> BoundSplit:
    """`count` GEMMs of time `t`, whole on their larger side."""
    seconds = count * t.total
    return BoundSplit(compute=seconds) if t.compute > t.memory else BoundSplit(memory=seconds)
