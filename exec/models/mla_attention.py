"""`MLAttention`: DeepSeek's multi-head latent attention over the paged latent cache
(`exec.memory.kv_pool.LatentKVPool`). Parameter names are the Hugging Face checkpoint's.

Per token the cache holds `[c_kv | k_pe]`: the RMS-normed latent (kv_lora_rank = r) and the
one rotated key shared by every head (qk_rope_head_dim = dr), written at out_cache_loc.

Computed absorbed (as SGLang's MLA decode, here for every batch): kv_b_proj splits per head
into W_UK [H, dn, r] and W_UV [H, dv, r]; a head's nope score q_nope . (W_UK c) is
(W_UK^T q_nope) . c, so each query becomes `[W_UK^T q_nope | q_pe]` (r + dr) and attends to
the cached `[c | k_pe]` rows as a one-KV-head (MQA) cache: `exec.layers.attention.paged_attention`
over the same attention metadata as every other layer, with the cache itself as keys and
values. The first r dimensions of the output are the attention-weighted latent, which W_UV
takes to the head's value. Per-head K and V are never materialised; the result equals
expanding the latent with kv_b_proj per step, up to rounding.

Shapes: T tokens, H heads, dn / dr / dv the nope, rope and value head dims, r the latent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from exec.layers.attention import paged_attention
from exec.layers.rotary import apply_rotary, apply_rotary_interleaved, softmax_mscale
from exec.models.model_config import ModelConfig

if TYPE_CHECKING:
    from exec.models.torch_batch import TorchBatch

# NOTE: transformers builds q_a_layernorm and kv_a_layernorm with its default eps, not
# config.rms_norm_eps (DeepSeek's checkpoints set both to 1e-6).
LORA_NORM_EPS = 1e-6


class MLAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        # NOTE: imported here: exec.models (the registry) imports this module's family.
        from exec.models.llama import RMSNorm

        super().__init__()
        m = c.mla
        self.layer, self.h = layer, c.num_heads
        self.dn, self.dr, self.dv, self.r = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
        q_out = self.h * m.qk_head_dim
        if m.q_lora_rank is None:
            self.q_proj = nn.Linear(c.hidden_size, q_out, bias=False)
        else:
            self.q_a_proj = nn.Linear(c.hidden_size, m.q_lora_rank, bias=c.attention_bias)
            self.q_a_layernorm = RMSNorm(m.q_lora_rank, LORA_NORM_EPS)
            self.q_b_proj = nn.Linear(m.q_lora_rank, q_out, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden_size, self.r + self.dr, bias=c.attention_bias)
        self.kv_a_layernorm = RMSNorm(self.r, LORA_NORM_EPS)
        self.kv_b_proj = nn.Linear(self.r, self.h * (self.dn + self.dv), bias=False)
        self.o_proj = nn.Linear(self.h * self.dv, c.hidden_size, bias=c.attention_bias)
        self.scale = m.qk_head_dim ** -0.5 * softmax_mscale(c.rope_scaling)
        self.rotate = apply_rotary_interleaved if c.raw.get("rope_interleave", True) else apply_rotary

    def _q(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return q.view(x.shape[0], self.h, self.dn + self.dr)            # [T, H, dn + dr]

    def _absorbed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_UK [H, dn, r], W_UV [H, dv, r]): views of kv_b_proj's weight."""
        w = self.kv_b_proj.weight.view(self.h, self.dn + self.dv, self.r)
        return w[:, : self.dn], w[:, self.dn :]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fb: TorchBatch) -> torch.Tensor:
        t = x.shape[0]
        q_nope, q_pe = self._q(x).split((self.dn, self.dr), dim=-1)     # [T, H, dn], [T, H, dr]
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split((self.r, self.dr), dim=-1)
        q_pe, k_pe = self.rotate(torch.cat((q_pe, k_pe[:, None]), dim=1), cos, sin).split((self.h, 1), dim=1)
        latent = torch.cat((self.kv_a_layernorm(c_kv), k_pe[:, 0]), dim=-1)   # [T, r + dr]
        pool = fb.kv_pool
        pool.write(self.layer, fb.out_cache_loc, latent)
        w_uk, w_uv = self._absorbed()
        q_lat = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [T, H, r]
        cache = pool.latent_layers[self.layer][:, None]                 # [slots, 1, r + dr]
        scale = pool.scale[self.layer]
        out = paged_attention(torch.cat((q_lat, q_pe), dim=-1), cache, cache, fb.attention,
                              self.scale, k_scale=scale, v_scale=scale)  # [T, H, r + dr]
        v = torch.bmm(out[..., : self.r].transpose(0, 1), w_uv.transpose(1, 2))  # [H, T, dv]
        return self.o_proj(v.transpose(0, 1).reshape(t, self.h * self.dv))     # [T, hidden]
