"""gpt-oss (`GptOssForCausalLM`): the Llama decoder with biased q/k/v/o projections,
alternating sliding-window (`layer_types`, window `sliding_window`) and full attention
layers, a learned sink logit per query head (`exec.layers.attention`), YaRN rope, and a
routed MoE in every layer: a biased router whose top-k logits are softmaxed, experts with
biases and a clamped SwiGLU, `(up + 1) * gate * sigmoid(alpha * gate)` with gate clamped
above at `swiglu_limit` and up to +-limit (transformers' `GptOssExperts`).

Checkpoint names (transformers' bf16 layout): `mlp.router.{weight,bias}`, and the experts
stacked, `mlp.experts.gate_up_proj` [E, H, 2I] with gate and up columns interleaved
(gate at even, up at odd), `gate_up_proj_bias` [E, 2I], `down_proj` [E, I, H],
`down_proj_bias` [E, H]. OpenAI's MXFP4 checkpoint (`*_blocks`, `*_scales`) is not read.

Shapes: T tokens, H hidden, E experts, I expert width, k experts per token.
"""

from __future__ import annotations

import torch
from torch import nn

from exec.layers.fused_experts import fused_experts
from exec.layers.packed_linear import PackedLinear
from exec.models.llama import LlamaForCausalLM
from exec.models.model_config import ModelConfig, UnsupportedModelError

SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0   # GptOssConfig's defaults (swiglu_alpha, swiglu_limit)


class GptOssExperts(nn.Module):
    """The stacked experts under the checkpoint's names (no forward: the block runs them)."""

    def __init__(self, hidden: int, width: int, experts: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.zeros(experts, hidden, 2 * width))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(experts, 2 * width))
        self.down_proj = nn.Parameter(torch.zeros(experts, width, hidden))
        self.down_proj_bias = nn.Parameter(torch.zeros(experts, hidden))


class GptOssMoeBlock(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        moe = c.moe
        self.router = nn.Linear(c.hidden_size, moe.num_experts, bias=True)
        self.experts = GptOssExperts(c.hidden_size, moe.expert_intermediate_size, moe.num_experts)
        self.top_k = moe.experts_per_token
        self.alpha = float(c.raw.get("swiglu_alpha", SWIGLU_ALPHA))
        self.limit = float(c.raw.get("swiglu_limit", SWIGLU_LIMIT))

    def fuse(self) -> None:
        """Gate rows first, then up, as `fused_experts` takes them: `gate_up` [E, 2I, H],
        `down` [E, H, I], and their biases [E, 2I] (gate, then up) and [E, H]."""
        e = self.experts
        with torch.no_grad():
            w, b = e.gate_up_proj, e.gate_up_proj_bias                      # [E, H, 2I], [E, 2I]
            gate_up = torch.cat((w[..., 0::2], w[..., 1::2]), dim=-1)      # [E, H, 2I] gate | up
            self.gate_up = nn.Parameter(gate_up.transpose(1, 2).contiguous(), requires_grad=False)
            self.gate_up_bias = nn.Parameter(torch.cat((b[:, 0::2], b[:, 1::2]), dim=-1),
                                             requires_grad=False)
            self.down = nn.Parameter(e.down_proj.transpose(1, 2).contiguous(), requires_grad=False)
            self.down_bias = nn.Parameter(e.down_proj_bias.detach().clone(), requires_grad=False)
        del self.experts

    def pack(self) -> None:
        self.router = PackedLinear.of(self.router)

    def activation(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """gate, up: [n, I] -> [n, I], the clamped SwiGLU."""
        gate, up = gate.clamp(max=self.limit), up.clamp(-self.limit, self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [T, H] -> (expert ids [T, k], weights [T, k]): the top-k router logits,
        softmaxed over the k (in x's dtype, as transformers)."""
        logits, ids = torch.topk(self.router(x), self.top_k, dim=-1)     # [T, k] each
        return ids, torch.softmax(logits, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]; after `fuse()`."""
        ids, weights = self.route(x)
        return fused_experts(x, self.gate_up, self.down, ids, weights, self.activation,
                             self.gate_up_bias, self.down_bias)          # [T, H]


def gpt_oss_mlp(c: ModelConfig, layer: int) -> tuple[str, nn.Module]:
    return "mlp", GptOssMoeBlock(c)


class GptOssForCausalLM(LlamaForCausalLM):
    checks_rope = True   # YaRN (`exec.layers.rotary`), or none

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, gpt_oss_mlp)

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Refuse, naming the field, a config without routed experts or with a rope
        scaling other than YaRN."""
        if config.moe is None:
            raise UnsupportedModelError("GptOssForCausalLM config.json has no 'num_local_experts' "
                                        "(the number of routed experts)")
        kind = (config.rope_scaling or {}).get("rope_type", "yarn")
        if kind != "yarn":
            raise UnsupportedModelError(f"GptOssForCausalLM rope scaling {kind!r} is not "
                                        f"supported (yarn or none)")
