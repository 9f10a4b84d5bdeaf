"""DeepSeek-V3 (`DeepseekV3ForCausalLM`): decoder layers of multi-head latent attention
(`exec.models.mla_attention`, caching the latent) and a dense MLP before `first_k_dense_replace`,
routed plus shared experts after (`DeepseekMoE`: sigmoid scores with the correction bias,
grouped top-k, `exec.models.deepseek_routing`). Rotary: YaRN with DeepSeek's mscale
(`exec.layers.rotary`) on the qk_rope_head_dim dims, interleaved pairs. Parameter names are the
Hugging Face checkpoint's (`self_attn.q_a_proj`, `mlp.gate.e_score_correction_bias`,
`mlp.experts.N.gate_proj`, `mlp.shared_experts.up_proj`, ...).

Shapes: T tokens, H hidden size.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from exec.layers.rotary import RotaryEmbedding
from exec.models.deepseek_routing import route
from exec.models.llama import MLP, RMSNorm
from exec.models.mla_attention import MLAttention
from exec.models.model_config import ModelConfig, UnsupportedModelError
from exec.models.moe_block import SparseMoeBlock
from exec.models.torch_batch import TorchBatch
from shared.config.moe_config import MoEConfig

EXPERT_NAMES = ("gate_proj", "up_proj", "down_proj")
ROPE_TYPES = ("default", "yarn")
# NOTE: required although shared/ has defaults for them: transformers' defaults differ
# (n_group 8, topk_group 4, first_k_dense_replace 3), so a missing one is ambiguous.
ROUTING_KEYS = ("n_routed_experts", "num_experts_per_tok", "n_group", "topk_group",
                "first_k_dense_replace")


def _mlp(c: ModelConfig, width: int) -> MLP:
    """A gated MLP of `width` (Llama's, whose size it reads from the config)."""
    return MLP(dataclasses.replace(c, intermediate_size=width))


class DeepseekMoE(SparseMoeBlock):
    """Routed experts (stacked by `fuse`, run by `exec.layers.fused_experts`) plus the shared
    experts (one gated MLP of all their widths) on every token. The router runs in float32,
    as transformers keeps it."""

    def __init__(self, c: ModelConfig, moe: MoEConfig) -> None:
        super().__init__(c.hidden_size, moe, EXPERT_NAMES)
        self.moe = moe
        if moe.score_correction_bias:
            self.gate.register_buffer("e_score_correction_bias", torch.zeros(moe.num_experts))
        if moe.shared_intermediate_size:
            self.shared_experts = _mlp(c, moe.shared_intermediate_size)

    def fuse(self) -> None:
        super().fuse()
        if hasattr(self, "shared_experts"):
            self.shared_experts.fuse()

    def pack(self) -> None:
        """The router stays a float32 matmul; the shared experts are packed."""
        if hasattr(self, "shared_experts"):
            self.shared_experts.pack()

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = nn.functional.linear(x.float(), self.gate.weight.float())   # [T, E]
        return route(logits, getattr(self.gate, "e_score_correction_bias", None), self.moe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)                                              # [T, H]
        return out + self.shared_experts(x) if hasattr(self, "shared_experts") else out


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = MLAttention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        sparse = c.moe is not None and c.moe.is_sparse(layer)
        self.mlp = DeepseekMoE(c, c.moe) if sparse else _mlp(c, c.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fb: TorchBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, fb)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """Hugging Face's `model.*`: embeddings, layers, final norm (and the rotary tables)."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(c.mla.qk_rope_head_dim, c.rope_theta, c.rope_scaling)


class DeepseekV3ForCausalLM(nn.Module):
    checks_rope = True   # check_config allows yarn (exec.models.model_config skips its llama3 check)

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderStack(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """MLA sizes (kv_lora_rank and the head dims) and the routing fields are required;
        rope: default or yarn."""
        if config.mla is None:
            raise UnsupportedModelError("DeepseekV3ForCausalLM config.json has no 'kv_lora_rank' "
                                        "(multi-head latent attention)")
        missing = [k for k in ROUTING_KEYS if k not in config.raw]
        if missing:
            raise UnsupportedModelError(f"DeepseekV3ForCausalLM config.json is missing "
                                        f"{', '.join(missing)} (expert routing)")
        kind = (config.rope_scaling or {}).get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise UnsupportedModelError(f"DeepseekV3ForCausalLM rope scaling {kind!r} is not "
                                        f"supported (supported: {', '.join(ROPE_TYPES)})")
        if kind == "yarn" and "original_max_position_embeddings" not in config.rope_scaling:
            raise UnsupportedModelError("yarn rope scaling is missing original_max_position_embeddings")

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: TorchBatch) -> torch.Tensor:
        """input_ids, positions: [T] int64. Returns the final-norm hidden states [T, H]."""
        x = self.model.embed_tokens(input_ids)                        # [T, H]
        cos, sin = self.model.rotary_emb(positions, x.dtype)          # [T, dr] each
        for layer in self.model.layers:
            x = layer(x, cos, sin, forward_batch)
        return self.model.norm(x)

    def prepare_for_inference(self, column_major: bool = False, pack: bool = False) -> None:
        """Fuse the gated MLPs' gate/up projections and stack the routed experts; with
        `pack`, pre-pack the MLPs for oneDNN. The attention keeps its checkpoint layout
        (`column_major` is not applied). Loading by name is no longer possible after."""
        if getattr(self, "prepared", False):
            return  # already prepared (a second runner around the same model)
        for layer in self.model.layers:
            layer.mlp.fuse()
            if pack:
                layer.mlp.pack()
        self.prepared = True

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, H] -> float32 logits [R, V]."""
        weight = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return nn.functional.linear(hidden, weight).float()
