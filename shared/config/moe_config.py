"""`MoEConfig`: the mixture-of-experts part of a Hugging Face config.json, read once for both
executors (`shared.config.hf_config.HFConfig.moe`).

The families name the same things differently; this reads them into one shape:

| field | Mixtral | Qwen3-MoE (Qwen2-MoE) | DeepSeek-V2/V3 | gpt-oss |
|---|---|---|---|---|
| routed experts | num_local_experts | num_experts | n_routed_experts | num_local_experts |
| experts per token | num_experts_per_tok | num_experts_per_tok | num_experts_per_tok | num_experts_per_tok |
| expert size | intermediate_size | moe_intermediate_size | moe_intermediate_size | intermediate_size |
| shared experts | - | (shared_expert_intermediate_size) | n_shared_experts | - |
| scoring | softmax, top-k renormalised | softmax, norm_topk_prob | scoring_func (sigmoid for V3) + e_score_correction_bias, grouped top-k | softmax over the top-k |
| dense layers | none | mlp_only_layers, decoder_sparse_step | first_k_dense_replace, moe_layer_freq | none |

A routing field the family needs but the file lacks is an InvalidModelConfig naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.config.invalid_model_config import InvalidModelConfig, positive

EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
SCORING = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int                 # routed experts
    experts_per_token: int           # top-k
    expert_intermediate_size: int    # one routed expert's gated-MLP width
    shared_intermediate_size: int    # all shared experts together as one gated MLP (0: none)
    scoring: str                     # "softmax" or "sigmoid"
    norm_topk_prob: bool             # renormalise the chosen experts' weights to sum to 1
    n_group: int                     # grouped top-k: experts in n_group groups ...
    topk_group: int                  # ... of which the best topk_group are eligible
    routed_scaling_factor: float     # routed output scaled by this (DeepSeek)
    score_correction_bias: bool      # DeepSeek-V3: a per-expert bias for choosing only
    sparse_layers: tuple[bool, ...]  # per layer: routed experts (True) or a dense MLP

    def is_sparse(self, layer: int) -> bool:
        return self.sparse_layers[layer]

    @property
    def num_sparse_layers(self) -> int:
        return sum(self.sparse_layers)


def moe_config(d: dict[str, Any], family: str | None, num_layers: int) -> MoEConfig | None:
    """The MoE part of config dict `d`, or None for a dense model (no expert count)."""
    key = next((k for k in EXPERT_COUNT_KEYS if d.get(k)), None)
    if key is None:
        return None
    experts, top_k = positive(d, key), positive(d, "num_experts_per_tok")
    if top_k > experts:
        raise InvalidModelConfig(f"num_experts_per_tok ({top_k}) exceeds {key} ({experts})")
    if family in ("deepseek_v2", "deepseek_v3"):
        return _deepseek(d, experts, top_k, num_layers)
    size_key = "moe_intermediate_size" if "moe_intermediate_size" in d else "intermediate_size"
    shared = d.get("shared_expert_intermediate_size") or 0
    return MoEConfig(
        num_experts=experts, experts_per_token=top_k,
        expert_intermediate_size=positive(d, size_key), shared_intermediate_size=int(shared),
        scoring="softmax", norm_topk_prob=_norm_topk(d, family), n_group=1, topk_group=1,
        routed_scaling_factor=1.0, score_correction_bias=False,
        sparse_layers=_qwen_sparse_layers(d, num_layers))


def _norm_topk(d: dict[str, Any], family: str | None) -> bool:
    """Mixtral and gpt-oss always renormalise over the top-k; Qwen follows norm_topk_prob."""
    if family in ("mixtral", "gpt_oss") or (family is None and "num_local_experts" in d):
        return True
    return bool(d.get("norm_topk_prob", False))


def _qwen_sparse_layers(d: dict[str, Any], num_layers: int) -> tuple[bool, ...]:
    """Qwen-MoE: layer i is sparse unless listed in mlp_only_layers or (i + 1) is not a
    multiple of decoder_sparse_step (1, every layer, by default)."""
    step = positive(d, "decoder_sparse_step", default=1)
    dense = set(d.get("mlp_only_layers") or ())
    return tuple(i not in dense and (i + 1) % step == 0 for i in range(num_layers))


def _deepseek(d: dict[str, Any], experts: int, top_k: int, num_layers: int) -> MoEConfig:
    """DeepSeek-V2/V3: shared experts, grouped top-k, dense layers before first_k_dense_replace.
    V3 defaults to sigmoid scores with the correction bias (noaux_tc), as transformers runs it."""
    size = positive(d, "moe_intermediate_size")
    v3 = d.get("model_type") == "deepseek_v3" or "DeepseekV3ForCausalLM" in (d.get("architectures") or ())
    scoring = d.get("scoring_func", "sigmoid" if v3 else "softmax")
    if scoring not in SCORING:
        raise InvalidModelConfig(f"scoring_func must be one of {', '.join(SCORING)}, got {scoring!r}")
    n_group = positive(d, "n_group", default=1)
    topk_group = positive(d, "topk_group", default=n_group)
    if experts % n_group or topk_group > n_group:
        raise InvalidModelConfig(f"n_group ({n_group}) must divide n_routed_experts ({experts}) "
                                 f"and be at least topk_group ({topk_group})")
    first_dense = int(d.get("first_k_dense_replace", 0))
    freq = positive(d, "moe_layer_freq", default=1)
    return MoEConfig(
        num_experts=experts, experts_per_token=top_k, expert_intermediate_size=size,
        shared_intermediate_size=size * int(d.get("n_shared_experts") or 0), scoring=scoring,
        norm_topk_prob=bool(d.get("norm_topk_prob", False)), n_group=n_group,
        topk_group=topk_group, routed_scaling_factor=float(d.get("routed_scaling_factor", 1.0)),
        score_correction_bias=d.get("topk_method", "noaux_tc" if v3 else "greedy") == "noaux_tc",
        sparse_layers=tuple(i >= first_dense and i % freq == 0 for i in range(num_layers)))
