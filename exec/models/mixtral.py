"""Mixtral (`MixtralForCausalLM`): the Llama decoder with every layer's MLP replaced by
routed experts (8 in Mixtral-8x7B), top-2 by softmax score, renormalised over the two.
Checkpoint names: `block_sparse_moe.gate`, `block_sparse_moe.experts.N.w1/w3/w2`
(gate, up, down)."""

from __future__ import annotations

from torch import nn

from exec.models.llama import LlamaForCausalLM
from exec.models.model_config import ModelConfig
from exec.models.moe_block import SparseMoeBlock, check_routed_experts

EXPERT_NAMES = ("w1", "w3", "w2")


def mixtral_experts(c: ModelConfig, layer: int) -> tuple[str, nn.Module]:
    return "block_sparse_moe", SparseMoeBlock(c.hidden_size, c.moe, EXPERT_NAMES)


class MixtralForCausalLM(LlamaForCausalLM):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, mixtral_experts)

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        check_routed_experts(config, "MixtralForCausalLM", "num_local_experts")
