"""Rotary position embeddings (RoPE), with Llama 3's and YaRN's frequency scaling (YaRN as
transformers' `_compute_yarn_parameters`, DeepSeek's mscale included), applied rotate-half
(Llama) or to interleaved pairs (DeepSeek's `rope_interleave`)."""

from __future__ import annotations

import math
from typing import Any

import torch


def inv_frequencies(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """[head_dim // 2] float32 inverse frequencies."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is not None and scaling.get("rope_type") == "llama3":
        inv_freq = _llama3_scaled(inv_freq, scaling)
    if scaling is not None and scaling.get("rope_type") == "yarn":
        inv_freq = _yarn_scaled(inv_freq, head_dim, theta, scaling)
    return inv_freq


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def attention_factor(scaling: dict[str, Any] | None) -> float:
    """What YaRN multiplies cos and sin by (1.0 for other rope types)."""
    if scaling is None or scaling.get("rope_type") != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor, mscale, all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and all_dim:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim)
    return yarn_mscale(factor)


def softmax_mscale(scaling: dict[str, Any] | None) -> float:
    """DeepSeek's factor on the softmax scale: mscale(factor, mscale_all_dim)^2 under YaRN
    with mscale_all_dim set, else 1.0 (transformers' `yarn_apply_mscale`)."""
    if scaling is None or scaling.get("rope_type") == "default" or not scaling.get("mscale_all_dim"):
        return 1.0
    return yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2


def _yarn_scaled(inv_freq: torch.Tensor, dim: int, theta: float, s: dict[str, Any]) -> torch.Tensor:
    """Interpolated (/ factor) below the correction range, extrapolated (as is) above it,
    a linear ramp between."""
    factor, old_context = s["factor"], s["original_max_position_embeddings"]
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_context / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # no singular ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp
    return inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation


def _llama3_scaled(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor, low, high = s["factor"], s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_context = s.get("original_max_position_embeddings", 8192)
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(medium, smoothed, scaled)


class RotaryEmbedding(torch.nn.Module):
    """cos/sin at arbitrary positions; applied to q and k as in Hugging Face (rotate_half)."""

    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None) -> None:
        super().__init__()
        self.args = (head_dim, theta, scaling)
        self.register_buffer("inv_freq", inv_frequencies(*self.args), persistent=False)
        self.attention_factor = attention_factor(scaling)

    def _apply(self, fn, recurse=True):
        """NOTE: `.to(dtype)` / `.to_empty()` must not touch the frequencies: they are
        recomputed in float32 on the new device after any move or cast."""
        super()._apply(fn, recurse)
        self.inv_freq = inv_frequencies(*self.args).to(self.inv_freq.device)
        return self

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)                      # [T, D]
        if self.attention_factor != 1.0:
            return (emb.cos() * self.attention_factor).to(dtype), (emb.sin() * self.attention_factor).to(dtype)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; cos, sin: [T, D]."""
    return x * cos[:, None, :] + _rotate_half(x) * sin[:, None, :]


def apply_rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D] with rotary pairs (x0, x1), (x2, x3), ...; cos, sin: [T, D]. Returns
    them rotated in rotate-half order (evens, then odds), as transformers'
    `apply_rotary_pos_emb_interleave`: q and k alike, so their dot products are the same."""
    return apply_rotary(torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1), cos, sin)
