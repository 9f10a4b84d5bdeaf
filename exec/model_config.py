"""`ModelConfig`: the Llama-family architecture read from a Hugging Face config.json.

Covers Llama 2/3 (llama3 rope scaling), Qwen2/2.5 (q/k/v bias), Qwen3 (q/k RMSNorm,
explicit head_dim), Mistral (no sliding window) and SmolLM2 (tied embeddings). Both rope
layouts are read: classic `rope_theta` + `rope_scaling`, and transformers 5's
`rope_parameters`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
}
MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral"}
LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
SUPPORTED_ROPE_TYPES = ("default", "llama3")


class UnsupportedModelError(ValueError):
    """The checkpoint's architecture or a feature of it is not supported."""


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    mlp_bias: bool
    eos_token_ids: tuple[int, ...]
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise FileNotFoundError(f"no config.json at {path}")
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        arch = _architecture(d)
        heads = _req(d, "num_attention_heads")
        kv_heads = d.get("num_key_value_heads") or heads
        if heads % kv_heads:
            raise UnsupportedModelError(f"num_attention_heads ({heads}) is not a multiple of "
                                        f"num_key_value_heads ({kv_heads})")
        if d.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"hidden_act {d['hidden_act']!r} is not supported (silu only)")
        rope_theta, rope_scaling = _rope(d)
        _refuse_sliding_window(arch, d)
        attention_bias = bool(d.get("attention_bias", False)) and arch != "mistral"
        default_head_dim = 128 if arch == "qwen3" else _req(d, "hidden_size") // heads
        return cls(
            arch=arch, vocab_size=_req(d, "vocab_size"), hidden_size=_req(d, "hidden_size"),
            intermediate_size=_req(d, "intermediate_size"),
            num_layers=_req(d, "num_hidden_layers"), num_heads=heads,
            num_kv_heads=kv_heads, head_dim=d.get("head_dim") or default_head_dim,
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            qkv_bias=arch == "qwen2" or attention_bias,
            o_bias=arch in ("llama", "qwen3", "mistral") and attention_bias,
            qk_norm=arch == "qwen3", mlp_bias=bool(d.get("mlp_bias", False)),
            eos_token_ids=_eos(d), raw=dict(d))

    @property
    def context_length(self) -> int:
        return self.max_position_embeddings


def _req(d: dict[str, Any], key: str) -> Any:
    if key not in d:
        raise UnsupportedModelError(f"config.json has no {key!r}")
    return d[key]


def _architecture(d: dict[str, Any]) -> str:
    names = d.get("architectures") or []
    for name in names:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    if not names and d.get("model_type") in MODEL_TYPES:
        return MODEL_TYPES[d["model_type"]]
    raise UnsupportedModelError(
        f"unsupported architecture {names or d.get('model_type')!r}; batchtwin runs "
        f"{', '.join(ARCHITECTURES)}")


def _rope(d: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, scaling dict or None) from either config layout."""
    params = d.get("rope_parameters")
    if params is not None:  # transformers 5
        theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta, scaling = d.get("rope_theta", 10000.0), d.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in SUPPORTED_ROPE_TYPES:
            raise UnsupportedModelError(f"rope scaling {kind!r} is not supported "
                                        f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
        scaling = None if kind == "default" else {**scaling, "rope_type": kind}
        missing = [k for k in LLAMA3_ROPE_KEYS if scaling is not None and k not in scaling]
        if missing:
            raise UnsupportedModelError(f"llama3 rope scaling is missing {', '.join(missing)}")
    return float(theta), scaling


def _refuse_sliding_window(arch: str, d: dict[str, Any]) -> None:
    window = d.get("sliding_window")
    if arch in ("qwen2", "qwen3") and not d.get("use_sliding_window", False):
        return
    context = int(d.get("max_position_embeddings", 2048))
    if window is not None and window < context:
        raise UnsupportedModelError(
            f"sliding-window attention (sliding_window={window} < context {context}) is not "
            f"supported; batchtwin attends over the full context")


def _eos(d: dict[str, Any]) -> tuple[int, ...]:
    eos = d.get("eos_token_id")
    if eos is None:
        return ()
    ids = eos if isinstance(eos, list) else [eos]
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise UnsupportedModelError(f"eos_token_id must be an int or a list of ints, got {eos!r}")
    return tuple(ids)
