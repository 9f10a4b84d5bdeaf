"""`ModelShape`: a dense Llama-family model (Llama 2/3, Qwen2/2.5/3, SmolLM2, Mistral) as the
FLOPs and bytes a cost model prices, read from a Hugging Face config.json.

Weight and KV dtypes are knobs (bf16, fp16, fp8, fp32); the weight dtype applies to every
weight (embeddings and LM head included). FLOPs count a multiply-add as 2. Attention over
`prefix` cached tokens and `extend` new tokens (causal) scores e*p + e*(e+1)/2 query-key
pairs per head; each pair costs 2 FLOPs for QK^T and 2 for PV.

Mixture-of-experts models (Mixtral, Qwen-MoE, DeepSeek) are not priced yet: reading one goes
to `moe_shape_from_config`, the marked extension point, which raises NotImplementedError.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from shared.hf_config import HFConfig, InvalidModelConfig

DTYPE_BYTES = MappingProxyType({"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1})
DTYPE_ALIASES = MappingProxyType({
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
})
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
            "kv_lora_rank")
MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")


def canonical_dtype(name: str) -> str:
    """'bf16', 'fp16', 'fp8' or 'fp32' for a dtype name or alias; ValueError otherwise."""
    key = str(name).lower().removeprefix("torch.")
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPE_BYTES)} "
                         f"(aliases: {', '.join(DTYPE_ALIASES)})")
    return key


def causal_pairs(prefix_lens: Any, extend_lens: Any) -> int:
    """Query-key pairs scored by causal attention, summed over requests: each of a request's
    e new tokens sees the p cached ones and the new ones up to itself, e*p + e*(e+1)/2."""
    p = np.asarray(prefix_lens, dtype=np.int64)
    e = np.asarray(extend_lens, dtype=np.int64)
    return int(np.sum(e * p + e * (e + 1) // 2))


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    qkv_bias: bool = False
    qk_norm: bool = False
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"

    def __post_init__(self) -> None:
        for f in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                  "intermediate_size", "vocab_size", "max_position_embeddings"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {f} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.name}: num_heads ({self.num_heads}) is not a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        object.__setattr__(self, "weight_dtype", canonical_dtype(self.weight_dtype))
        object.__setattr__(self, "kv_dtype", canonical_dtype(self.kv_dtype))

    def with_dtypes(self, weight_dtype: str | None = None, kv_dtype: str | None = None
                    ) -> ModelShape:
        return dataclasses.replace(self, weight_dtype=weight_dtype or self.weight_dtype,
                                   kv_dtype=kv_dtype or self.kv_dtype)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def weight_bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def linear_params_per_layer(self) -> int:
        """q, k, v, o projections and the gated MLP (gate, up, down)."""
        h = self.hidden_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        return attention + 3 * h * self.intermediate_size

    @property
    def params_per_layer(self) -> int:
        """Linear weights plus q/k/v biases, the two RMSNorms and Qwen3's q/k norms."""
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return self.linear_params_per_layer + bias + 2 * self.hidden_size + qk_norm

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        """All parameters; a tied LM head shares the embedding matrix."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (self.num_layers * self.params_per_layer + self.embedding_params + lm_head
                + self.hidden_size)

    @property
    def weight_bytes_per_layer(self) -> int:
        return self.params_per_layer * self.weight_bytes_per_param

    @property
    def weight_bytes(self) -> int:
        return self.param_count * self.weight_bytes_per_param

    @property
    def linear_weight_bytes(self) -> int:
        """Bytes a forward reads for the decoder layers' linear weights (all layers)."""
        return self.num_layers * self.linear_params_per_layer * self.weight_bytes_per_param

    @property
    def lm_head_weight_bytes(self) -> int:
        """Bytes the LM head reads (the embedding matrix when tied)."""
        return self.embedding_params * self.weight_bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for one token in every layer: 2 * layers * kv_heads * head_dim * bytes."""
        return 2 * self.num_layers * self.kv_dim * DTYPE_BYTES[self.kv_dtype]

    @property
    def linear_flops_per_token(self) -> int:
        """Decoder-layer linear FLOPs per token row (all layers; LM head excluded)."""
        return 2 * self.num_layers * self.linear_params_per_layer

    @property
    def lm_head_flops_per_row(self) -> int:
        return 2 * self.hidden_size * self.vocab_size

    @property
    def attention_flops_per_pair(self) -> int:
        """QK^T and PV FLOPs per query-key pair, all heads and layers."""
        return 4 * self.num_layers * self.q_dim

    def attention_flops(self, prefix_lens: Any, extend_lens: Any) -> int:
        """Attention FLOPs of requests with these prefix and extend lengths (ints or arrays)."""
        return self.attention_flops_per_pair * causal_pairs(prefix_lens, extend_lens)


def embedded_configs() -> dict[str, dict[str, Any]]:
    """The embedded config.json excerpts by short key (a fresh copy each call)."""
    return {k: dict(v) for k, v in EMBEDDED_CONFIGS.items()}


def get_model_shape(key_or_path_or_dict: str | os.PathLike[str] | Mapping[str, Any],
                    weight_dtype: str = "bf16", kv_dtype: str = "bf16") -> ModelShape:
    """A ModelShape from an embedded short key, a config.json path (file or its folder), or a
    config dict. Unknown keys raise ValueError listing the known ones."""
    source = key_or_path_or_dict
    if isinstance(source, Mapping):
        config, name = dict(source), str(source.get("_name_or_path", "config"))
    elif os.fspath(source) in EMBEDDED_CONFIGS:
        name = os.fspath(source)
        config = dict(EMBEDDED_CONFIGS[name])
    else:
        config, name = _read_config(Path(source)), os.fspath(source)
    return shape_from_config(config, name, weight_dtype, kv_dtype)


def _read_config(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"unknown model {str(path)!r}: not a config.json path; known keys: "
                         f"{', '.join(sorted(EMBEDDED_CONFIGS))}")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return config


def shape_from_config(config: Mapping[str, Any], name: str = "config",
                      weight_dtype: str = "bf16", kv_dtype: str = "bf16") -> ModelShape:
    """Read a dense Llama-family config.json dict through the shared reader
    (`shared.hf_config.HFConfig`); MoE configs go to the extension point.

    NOTE: a sliding window is priced as full attention (an upper bound), and an
    architecture outside the Llama family as the dense Llama shape its sizes give."""
    if is_moe_config(config):
        return moe_shape_from_config(config)
    try:
        c = HFConfig.from_dict(dict(config))
    except InvalidModelConfig as e:
        raise ValueError(f"{name}: {e} (a dense Llama-family config needs hidden_size, "
                         f"num_hidden_layers, num_attention_heads, intermediate_size, "
                         f"vocab_size)") from None
    return ModelShape(
        name=name, hidden_size=c.hidden_size, num_layers=c.num_layers, num_heads=c.num_heads,
        num_kv_heads=c.num_kv_heads, head_dim=c.head_dim, intermediate_size=c.intermediate_size,
        vocab_size=c.vocab_size, tie_word_embeddings=c.tie_word_embeddings,
        max_position_embeddings=c.max_position_embeddings, qkv_bias=c.qkv_bias,
        qk_norm=c.qk_norm, weight_dtype=weight_dtype, kv_dtype=kv_dtype)


def is_moe_config(config: Mapping[str, Any]) -> bool:
    arches = " ".join(config.get("architectures") or []).lower()
    return (any(config.get(k) for k in MOE_KEYS) or config.get("model_type") in MOE_MODEL_TYPES
            or "moe" in arches or "mixtral" in arches or "deepseek" in arches)


def moe_shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """EXTENSION POINT for mixture-of-experts models (Mixtral, Qwen-MoE, DeepSeek MoE/MLA).

    To implement: per token, the attention linears as for a dense model (MLA: the low-rank
    q/kv projections and a latent KV of kv_lora_rank + qk_rope_head_dim per token), plus
    top_k routed experts (3 * hidden * moe_intermediate_size each) and any shared experts;
    per step, the weight bytes of the distinct experts the batch's tokens touch (all experts
    once the batch is large), and expert-parallel all-to-all traffic."""
    kind = config.get("model_type") or (config.get("architectures") or ["?"])[0]
    raise NotImplementedError(
        f"mixture-of-experts model {kind!r} is not priced yet: implement the extension point "
        f"sim.model_shapes.moe_shape_from_config (dense Llama-family configs only for now)")


EMBEDDED_CONFIGS = MappingProxyType({
    "llama-3-8b": MappingProxyType({  # meta-llama/Meta-Llama-3-8B config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "eos_token_id": 128001}),
    "llama-3-70b": MappingProxyType({  # meta-llama/Meta-Llama-3-70B config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 28672, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "eos_token_id": 128001}),
    "qwen2.5-7b": MappingProxyType({  # Qwen/Qwen2.5-7B-Instruct config.json
        "architectures": ("Qwen2ForCausalLM",), "model_type": "qwen2", "hidden_size": 3584,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "eos_token_id": 151645}),
    "qwen2.5-72b": MappingProxyType({  # Qwen/Qwen2.5-72B-Instruct config.json
        "architectures": ("Qwen2ForCausalLM",), "model_type": "qwen2", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 29568, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "eos_token_id": 151645}),
    "qwen3-8b": MappingProxyType({  # Qwen/Qwen3-8B config.json
        "architectures": ("Qwen3ForCausalLM",), "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
        "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "eos_token_id": 151645}),
    "smollm2-135m": MappingProxyType({  # HuggingFaceTB/SmolLM2-135M config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192, "rope_theta": 100000.0,
        "eos_token_id": 0}),
})
