"""A Llama-family decoder (Llama 2/3, Qwen2/2.5, Qwen3, Mistral, SmolLM2) on the paged KV
cache. Parameter names mirror Hugging Face's, so checkpoints load by name.

Other families reuse it whole and choose each layer's feed-forward (`FeedForward`, the one
hook): `exec.models.mixtral` and `exec.models.qwen3_moe` put routed experts there.

Shapes: T tokens in the forward, H hidden size, heads Hq / Hkv of size D.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from exec.layers.attention import paged_attention
from exec.layers.packed_linear import PackedLinear
from exec.layers.rotary import RotaryEmbedding, apply_rotary
from exec.models.model_config import ModelConfig
from exec.models.torch_batch import TorchBatch

# A family's feed-forward of layer i: (its checkpoint name, the module). The module maps
# [T, H] -> [T, H] and has `fuse()` (after loading) and `pack()` (after fuse, CPU oneDNN).
FeedForward = Callable[[ModelConfig, int], tuple[str, nn.Module]]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """As Hugging Face: normalise in float32, cast back, then scale."""
        normed = nn.functional.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * normed.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.hq, self.hkv, self.d = layer, c.num_heads, c.num_kv_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.hq * self.d, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.hkv * self.d, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.hkv * self.d, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.hq * self.d, c.hidden_size, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(self.d, c.rms_norm_eps)
            self.k_norm = RMSNorm(self.d, c.rms_norm_eps)
        self.qk_norm = c.qk_norm
        self.sliding = c.layer_window(layer) is not None
        # [Hq] gpt-oss's sink logits (HFConfig.attention_sinks); None for the other families
        self.sinks = nn.Parameter(torch.zeros(self.hq)) if c.attention_sinks else None

    def fuse(self) -> None:
        """Replace q/k/v_proj by one qkv_proj (one matmul instead of three)."""
        self.qkv_proj = _fused_linear(self.q_proj, self.k_proj, self.v_proj)
        del self.q_proj, self.k_proj, self.v_proj

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if hasattr(self, "qkv_proj"):
            return self.qkv_proj(x).split((self.hq * self.d, self.hkv * self.d, self.hkv * self.d), -1)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def pack(self) -> None:
        self.qkv_proj, self.o_proj = PackedLinear.of(self.qkv_proj), PackedLinear.of(self.o_proj)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fb: TorchBatch) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self._qkv(x)
        q = q.reshape(t, self.hq, self.d)     # [T, Hq, D]
        k = k.reshape(t, self.hkv, self.d)    # [T, Hkv, D]
        v = v.reshape(t, self.hkv, self.d)    # [T, Hkv, D]
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(torch.cat((q, k), dim=1), cos, sin).split((self.hq, self.hkv), dim=1)
        fb.kv_pool.write(self.layer, fb.out_cache_loc, k, v)
        out = paged_attention(q, fb.kv_pool.k_layers[self.layer], fb.kv_pool.v_layers[self.layer],
                              fb.attention, scale=self.d ** -0.5, sliding=self.sliding,
                              sinks=self.sinks)                       # [T, Hq, D]
        return self.o_proj(out.reshape(t, self.hq * self.d))      # [T, H]


class MLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def fuse(self) -> None:
        """Replace gate/up_proj by one gate_up_proj."""
        self.gate_up_proj = _fused_linear(self.gate_proj, self.up_proj)
        del self.gate_proj, self.up_proj

    def pack(self) -> None:
        self.gate_up_proj = PackedLinear.of(self.gate_up_proj)
        self.down_proj = PackedLinear.of(self.down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "gate_up_proj"):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)   # [T, I] each
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(nn.functional.silu(gate) * up)


def dense_mlp(c: ModelConfig, layer: int) -> tuple[str, nn.Module]:
    """Llama's feed-forward: a gated MLP at `mlp` in every layer."""
    return "mlp", MLP(c)


def _fused_linear(*parts: nn.Linear) -> nn.Linear:
    w = parts[0].weight
    fused = nn.Linear(w.shape[1], sum(p.weight.shape[0] for p in parts), bias=parts[0].bias is not None,
                      device=w.device, dtype=w.dtype)
    with torch.no_grad():
        fused.weight.copy_(torch.cat([p.weight for p in parts]))
        if fused.bias is not None:
            fused.bias.copy_(torch.cat([p.bias for p in parts]))
    return fused


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int, feed_forward: FeedForward) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c, layer)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.ffn_name, ffn = feed_forward(c, layer)
        self.add_module(self.ffn_name, ffn)

    @property
    def ffn(self) -> nn.Module:
        """The feed-forward, under its checkpoint name (`mlp`, Mixtral's `block_sparse_moe`)."""
        return self._modules[self.ffn_name]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fb: TorchBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, fb)
        return x + self.ffn(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """Hugging Face's `model.*`: embeddings, layers, final norm."""

    def __init__(self, c: ModelConfig, feed_forward: FeedForward) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i, feed_forward) for i in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(c.head_dim, c.rope_theta, c.rope_scaling)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, feed_forward: FeedForward = dense_mlp) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderStack(config, feed_forward)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """The dense families run every config `exec.models.model_config` accepts."""

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: TorchBatch) -> torch.Tensor:
        """input_ids, positions: [T] int64. Returns the final-norm hidden states [T, H]."""
        x = self.model.embed_tokens(input_ids)                        # [T, H]
        cos, sin = self.model.rotary_emb(positions, x.dtype)          # [T, D] each
        for layer in self.model.layers:
            x = layer(x, cos, sin, forward_batch)
        return self.model.norm(x)

    def prepare_for_inference(self, column_major: bool = False, pack: bool = False) -> None:
        """Fuse q/k/v and gate/up projections (fewer, larger matmuls; routed experts are
        stacked, `exec.models.moe_block`). With `pack` (CPU, `exec.layers.packed_linear.can_pack`),
        pre-pack every projection and the LM head for oneDNN (experts stay stacked tensors).
        Otherwise with `column_major` (float32 on CPU), store weight matrices transposed:
        CPU GEMV streams an [in, out] layout about 1.7x faster. Loading by name is no longer
        possible after."""
        if hasattr(self.model.layers[0].self_attn, "qkv_proj"):
            return  # already prepared (a second runner around the same model)
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.ffn.fuse()
        if pack:
            self._pack()
        elif column_major:
            with torch.no_grad():
                for p in self.parameters():
                    if p.dim() == 2:
                        p.data = p.data.t().contiguous().t()

    def _pack(self) -> None:
        for layer in self.model.layers:
            layer.self_attn.pack()
            layer.ffn.pack()
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        self.packed_lm_head = PackedLinear(head)
        if not self.config.tie_word_embeddings:
            del self.lm_head  # the packed copy replaces it

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, H] -> float32 logits [R, V]."""
        if hasattr(self, "packed_lm_head"):
            return self.packed_lm_head(hidden).float()
        weight = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return nn.functional.linear(hidden, weight).float()
