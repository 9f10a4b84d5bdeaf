"""Qwen3-MoE (`Qwen3MoeForCausalLM`): the Qwen3 decoder (q/k RMSNorm, explicit head_dim)
whose sparse layers route each token to its top-k experts by softmax score, renormalised
over the k when `norm_topk_prob`. A layer is dense (a gated MLP of `intermediate_size`)
when listed in `mlp_only_layers` or off the `decoder_sparse_step` grid
(`shared.config.moe_config.MoEConfig.sparse_layers`). Checkpoint names: `mlp.gate`,
`mlp.experts.N.gate_proj/up_proj/down_proj`; dense layers `mlp.*_proj` as Qwen3."""

from __future__ import annotations

from torch import nn

from exec.models.llama import MLP, LlamaForCausalLM
from exec.models.model_config import ModelConfig
from exec.models.moe_block import SparseMoeBlock, check_routed_experts

EXPERT_NAMES = ("gate_proj", "up_proj", "down_proj")


def qwen3_moe_mlp(c: ModelConfig, layer: int) -> tuple[str, nn.Module]:
    if c.moe.is_sparse(layer):
        return "mlp", SparseMoeBlock(c.hidden_size, c.moe, EXPERT_NAMES)
    return "mlp", MLP(c)


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, qwen3_moe_mlp)

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        check_routed_experts(config, "Qwen3MoeForCausalLM", "num_experts")
