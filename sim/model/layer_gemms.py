"""`forward_gemms(model, tp)`: the GEMMs of one forward through the decoder layers on one of
`tp` ranks, by weight shape, for pricing each at its own shape (`sim.cost.kernel.gemm_time`).

Per layer, as SGLang shards them: q/k/v fused and column-parallel (KV heads replicated when
tp exceeds them), o row-parallel; MLA's q_a and kv_a replicated, q_b and o sharded by head,
and kv_b (latent -> per-head nope keys and values) applied per KV token in naive extends
(`ExtendGemm`) and absorbed per token in decode (two per-head products, one GEMM each);
the dense MLP's gate/up fused column-parallel and down row-parallel; a sparse layer's router
(replicated) and shared experts (sharded like the MLP). Routed experts are priced apart
(`sim.cost.expert_cost`). All counts are summed over layers.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.model.shape import ModelShape


class Gemm(NamedTuple):
    """`count` GEMMs per forward with an [n, k] weight (per rank) over the step's rows."""

    name: str
    n: int
    k: int
    count: int


class ForwardGemms(NamedTuple):
    attention: tuple[Gemm, ...]      # attention projections over an attention rank's rows
    rows: tuple[Gemm, ...]           # MLP, router and shared experts over the step's rows
    decode_rows: tuple[Gemm, ...]    # over an attention rank's rows of decode steps (MLA absorbed)
    extend_kv: tuple[Gemm, ...]      # over the KV tokens of extend steps (MLA naive kv_b)


def forward_gemms(m: ModelShape, tp: int, attention_tp: int | None = None) -> ForwardGemms:
    """The GEMMs of a forward on one of `tp` ranks, the attention projections sharded over
    `attention_tp` GPUs (None: tp; below tp under attention data parallelism)."""
    layers, sparse, atp = m.num_layers, m.num_sparse_layers, attention_tp or tp
    attention, gemms = tuple(_attention(m, atp, layers)), []
    if layers - sparse:
        gemms += _mlp(m.hidden_size, m.intermediate_size, tp, layers - sparse, "mlp")
    if sparse:
        gemms.append(Gemm("router", m.moe.num_experts, m.hidden_size, sparse))
        if m.moe.shared_intermediate_size:
            gemms += _mlp(m.hidden_size, m.moe.shared_intermediate_size, tp, sparse, "shared")
    if m.mla is None:
        return ForwardGemms(attention, tuple(gemms), (), ())
    return ForwardGemms(attention, tuple(gemms), _absorbed(m, atp), (_kv_b(m, atp),))


def _attention(m: ModelShape, tp: int, layers: int) -> list[Gemm]:
    h = m.hidden_size
    if m.mla is None:
        kv_heads = max(1, m.num_kv_heads // tp)
        qkv = m.q_dim // tp + 2 * kv_heads * m.head_dim
        return [Gemm("qkv", qkv, h, layers), Gemm("o", h, m.q_dim // tp, layers)]
    a, heads = m.mla, m.num_heads // tp
    q = ([Gemm("q", heads * a.qk_head_dim, h, layers)] if a.q_lora_rank is None else
         [Gemm("q_a", a.q_lora_rank, h, layers),
          Gemm("q_b", heads * a.qk_head_dim, a.q_lora_rank, layers)])
    return [*q, Gemm("kv_a", a.cache_dim, h, layers), Gemm("o", h, heads * a.v_head_dim, layers)]


def _absorbed(m: ModelShape, tp: int) -> tuple[Gemm, ...]:
    """Decode's kv_b folded into the query and the output, per head."""
    a, heads, layers = m.mla, m.num_heads // tp, m.num_layers
    return (Gemm("q_absorb", heads * a.kv_lora_rank, a.qk_nope_head_dim, layers),
            Gemm("v_absorb", heads * a.v_head_dim, a.kv_lora_rank, layers))


def _kv_b(m: ModelShape, tp: int) -> Gemm:
    a, heads = m.mla, m.num_heads // tp
    return Gemm("kv_b", heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, m.num_layers)


def _mlp(hidden: int, width: int, tp: int, layers: int, name: str) -> list[Gemm]:
    return [Gemm(f"{name}_gate_up", 2 * width // tp, hidden, layers),
            Gemm(f"{name}_down", hidden, width // tp, layers)]
