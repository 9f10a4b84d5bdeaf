"""Sharding a loaded Llama-family model over a tensor-parallel group (Megatron's split):

- attention: q/k/v column-parallel by heads (each rank keeps Hq/world query heads and
  Hkv/world KV heads, or one replicated KV head when Hkv < world), o_proj row-parallel;
- MLP: gate/up column-parallel by intermediate features, down_proj row-parallel;
- embedding and LM head vocabulary-parallel (the runner all-gathers the logits).

Norms and rotary are replicated. `shard_model` runs after the weights are loaded and before
`prepare_for_inference`, whose q/k/v and gate/up fusion then concatenates this rank's shards.
`check_tp_size` refuses a size the model cannot be split by, naming tp_size, before loading.
"""

from __future__ import annotations

import torch
from torch import nn

from exec.distributed.tp_group import TPGroup
from exec.layers.parallel_linear import (
    RowParallelLinear,
    VocabParallelEmbedding,
    column_shard,
    shard_range,
)
from exec.models.model_config import ModelConfig


def check_tp_size(config: ModelConfig, tp_size: int) -> None:
    """ValueError naming tp_size unless `config` is a dense Llama-family model that
    `tp_size` ranks can split (heads, KV heads, intermediate size and vocabulary)."""
    from exec.models import model_class
    from exec.models.llama import LlamaForCausalLM

    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise ValueError(f"tp_size (--tp) must be a positive integer, got {tp_size!r}")
    if tp_size == 1:
        return
    if config.mla is not None or config.moe is not None or model_class(config) is not LlamaForCausalLM:
        raise ValueError(f"tp_size (--tp) {tp_size}: tensor parallelism runs dense Llama-family "
                         f"models; {list(config.names)} is not one (use --tp 1)")
    for name, n in (("num_attention_heads", config.num_heads),
                    ("intermediate_size", config.intermediate_size), ("vocab_size", config.vocab_size)):
        if n % tp_size:
            raise ValueError(f"tp_size (--tp) {tp_size} does not divide {name} ({n})")
    hkv = config.num_kv_heads
    if hkv % tp_size and tp_size % hkv:
        raise ValueError(f"tp_size (--tp) {tp_size} and num_key_value_heads ({hkv}): one must "
                         f"divide the other (KV heads are split over ranks, or replicated when fewer)")


def shard_model(model: nn.Module, group: TPGroup) -> None:
    """Replace `model`'s full layers by this rank's shards, in place."""
    check_tp_size(model.config, group.world_size)
    if hasattr(model.model.layers[0].self_attn, "qkv_proj"):
        raise RuntimeError("shard_model needs the loaded model, before prepare_for_inference")
    for layer in model.model.layers:
        _shard_attention(layer.self_attn, group)
        _shard_mlp(layer.ffn, group)
    model.model.embed_tokens = VocabParallelEmbedding(model.model.embed_tokens, group)
    if not model.config.tie_word_embeddings:
        model.lm_head = _rows_of(model.lm_head, shard_range(model.config.vocab_size, group, "vocab_size"))


def _shard_attention(attn: nn.Module, group: TPGroup) -> None:
    world = group.world_size
    attn.q_proj = column_shard(attn.q_proj, group, "num_attention_heads")
    attn.k_proj = _kv_shard(attn.k_proj, attn.hkv, attn.d, group)
    attn.v_proj = _kv_shard(attn.v_proj, attn.hkv, attn.d, group)
    attn.o_proj = RowParallelLinear(attn.o_proj, group, "num_attention_heads")
    # NOTE: forward reshapes by these: this rank's query and KV heads from now on.
    attn.hq, attn.hkv = attn.hq // world, max(1, attn.hkv // world)


def _kv_shard(linear: nn.Linear, hkv: int, d: int, group: TPGroup) -> nn.Linear:
    """This rank's KV heads of k_proj / v_proj [Hkv * D, H]. With fewer KV heads than ranks,
    rank r keeps head r * Hkv // world: the one its query heads Hq/world * r.. attend with."""
    if hkv % group.world_size == 0:
        return column_shard(linear, group, "num_key_value_heads")
    head = group.rank * hkv // group.world_size
    return _rows_of(linear, slice(head * d, (head + 1) * d))


def _shard_mlp(mlp: nn.Module, group: TPGroup) -> None:
    mlp.gate_proj = column_shard(mlp.gate_proj, group, "intermediate_size")
    mlp.up_proj = column_shard(mlp.up_proj, group, "intermediate_size")
    mlp.down_proj = RowParallelLinear(mlp.down_proj, group, "intermediate_size")


def _rows_of(linear: nn.Linear, rows: slice) -> nn.Linear:
    """An nn.Linear of `linear`'s output rows `rows` (weight [len(rows), in])."""
    out = nn.Linear(linear.in_features, rows.stop - rows.start, bias=linear.bias is not None,
                    device=linear.weight.device, dtype=linear.weight.dtype)
    with torch.no_grad():
        out.weight.copy_(linear.weight[rows])
        if linear.bias is not None:
            out.bias.copy_(linear.bias[rows])
    return out
