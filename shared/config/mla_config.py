"""`MLAConfig`: DeepSeek's multi-head latent attention, as a config.json describes it
(`shared.config.hf_config.HFConfig.mla`).

Per token and layer the KV cache holds the compressed latent (`kv_lora_rank`) and the one
shared rotary key (`qk_rope_head_dim`): `cache_dim` values, not per-head K and V. Queries
and keys have `qk_nope_head_dim + qk_rope_head_dim` per head, values `v_head_dim`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.config.invalid_model_config import positive

MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class MLAConfig:
    q_lora_rank: int | None   # None: q is one full-rank projection (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_dim(self) -> int:
        """Values cached per token and layer: the latent plus the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def mla_config(d: dict[str, Any]) -> MLAConfig | None:
    """The MLA part of config dict `d` (it has `kv_lora_rank`), or None."""
    if not d.get("kv_lora_rank"):
        return None
    sizes = {k: positive(d, k) for k in MLA_KEYS}
    q_rank = d.get("q_lora_rank")
    return MLAConfig(q_lora_rank=None if q_rank is None else positive(d, "q_lora_rank"), **sizes)
