"""`HFConfig`: the one reader of a Hugging Face config.json, for both executors.

It reads the architecture (from `architectures`, else `model_type`), the sizes, heads and
head_dim, both rope layouts (classic `rope_theta` + `rope_scaling`, and transformers 5's
`rope_parameters`), the biases, the effective sliding window and the EOS ids, and derives
what the families differ in: Qwen2's q/k/v bias, Qwen3's q/k norms and explicit head_dim,
Mistral's ignored `attention_bias` (as transformers does). Mixture-of-experts routing
(`moe`, `shared.config.moe_config`), multi-head latent attention (`mla`, `shared.config.mla_config`) and a
checkpoint's `quantization_config` (`quantization`, `shared.config.quant_config`) are read here too.
exec builds its model from it and refuses what it cannot run (`exec.models.model_config`); sim
prices it (`sim.model.from_config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from shared.config.invalid_model_config import InvalidModelConfig, positive
from shared.config.mla_config import MLAConfig, mla_config
from shared.config.moe_config import MoEConfig, moe_config
from shared.config.quant_config import QuantConfig, quant_config

ARCHITECTURES = MappingProxyType({
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
})
MODEL_TYPES = MappingProxyType({family: family for family in ARCHITECTURES.values()})
QK_NORM_FAMILIES = ("qwen3", "qwen3_moe")
DEFAULT_CONTEXT = 2048
LAYER_TYPES = ("full_attention", "sliding_attention")   # transformers' config.layer_types

__all__ = ["ARCHITECTURES", "HFConfig", "InvalidModelConfig", "MLAConfig", "MoEConfig",
           "QuantConfig", "eos_token_ids"]


@dataclass(frozen=True)
class HFConfig:
    arch: str | None                 # the family (ARCHITECTURES' values), None: another
    names: tuple[str, ...]           # `architectures` as given (or the model_type)
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None   # with "rope_type"; None for default rope
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool             # effective: Mistral ignores the key
    mlp_bias: bool
    hidden_act: str
    sliding_window: int | None       # effective: None when every token sees the whole context
    eos_token_ids: tuple[int, ...]
    moe: MoEConfig | None = None           # None: a dense model
    mla: MLAConfig | None = None           # None: per-head K and V
    quantization: QuantConfig | None = None
    layer_types: tuple[str, ...] = ()      # per layer, one of LAYER_TYPES (empty: not given)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_file(cls, path: str | Path) -> HFConfig:
        """The config.json at `path` (or in the folder `path`); FileNotFoundError when there is
        none, and the class's InvalidModelConfig naming the file for a bad one."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise FileNotFoundError(f"no config.json at {path}")
        try:
            return cls.from_dict(_json_object(path))
        except InvalidModelConfig as e:
            raise type(e)(f"{path}: {e}") from None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HFConfig:
        """Raises InvalidModelConfig naming the field: a required one missing, a size that is
        not a positive integer, heads that do not divide hidden_size (without head_dim), kv
        heads that do not divide heads, or a MoE / MLA / quantization field the model needs."""
        arch, names = _architecture(d)
        heads, hidden = positive(d, "num_attention_heads"), positive(d, "hidden_size")
        kv_heads = positive(d, "num_key_value_heads", default=heads)
        if heads % kv_heads:
            raise InvalidModelConfig(f"num_attention_heads ({heads}) is not a multiple of "
                                     f"num_key_value_heads ({kv_heads})")
        theta, scaling = _rope(d)
        layers, mla = positive(d, "num_hidden_layers"), mla_config(d)
        return cls(
            arch=arch, names=names, vocab_size=positive(d, "vocab_size"), hidden_size=hidden,
            intermediate_size=positive(d, "intermediate_size"),
            num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
            head_dim=mla.qk_head_dim if mla else _head_dim(d, arch, hidden, heads),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=positive(d, "max_position_embeddings",
                                              default=DEFAULT_CONTEXT),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            attention_bias=bool(d.get("attention_bias", False)) and arch != "mistral",
            mlp_bias=bool(d.get("mlp_bias", False)), hidden_act=d.get("hidden_act", "silu"),
            sliding_window=_sliding_window(arch, d), layer_types=_layer_types(d, layers),
            eos_token_ids=eos_token_ids(d),
            moe=moe_config(d, arch, layers), mla=mla, quantization=quant_config(d), raw=dict(d))

    @property
    def qkv_bias(self) -> bool:
        return self.arch == "qwen2" or self.attention_bias

    @property
    def o_bias(self) -> bool:
        return self.arch in ("llama", "qwen3", "mistral", "gpt_oss") and self.attention_bias

    @property
    def attention_sinks(self) -> bool:
        """gpt-oss: each query head has a learned sink logit that joins its softmax (and
        takes a share of it) without a value."""
        return self.arch == "gpt_oss"

    def layer_window(self, layer: int) -> int | None:
        """The window of layer `layer` (a query at position q sees keys k with q - k <
        window, as transformers' sliding-window mask), None when it sees the whole
        context: `sliding_window` applies to the `layer_types` sliding layers, or to every
        layer when the config lists no layer types (Mistral)."""
        if self.sliding_window is None or (self.layer_types
                                           and self.layer_types[layer] != "sliding_attention"):
            return None
        return self.sliding_window

    @property
    def qk_norm(self) -> bool:
        return self.arch in QK_NORM_FAMILIES

    @property
    def context_length(self) -> int:
        return self.max_position_embeddings


def _json_object(path: Path) -> dict[str, Any]:
    """config.json's object; InvalidModelConfig for a file that is not JSON or not an object."""
    try:
        d = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidModelConfig(f"not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise InvalidModelConfig(f"must hold a JSON object, got {type(d).__name__}")
    return d





def _head_dim(d: dict[str, Any], arch: str | None, hidden: int, heads: int) -> int:
    """`head_dim` when given (Qwen3 defaults to 128), else hidden_size / num_attention_heads.
    MLA models have qk_nope_head_dim + qk_rope_head_dim instead (`HFConfig.mla`)."""
    if d.get("head_dim") is not None:
        return positive(d, "head_dim")
    if arch in QK_NORM_FAMILIES:
        return 128
    if hidden % heads:
        raise InvalidModelConfig(f"hidden_size ({hidden}) is not a multiple of num_attention_heads "
                                 f"({heads}) and there is no head_dim")
    return hidden // heads


def _architecture(d: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    names = tuple(d.get("architectures") or ())
    for name in names:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name], names
    if not names:
        return MODEL_TYPES.get(d.get("model_type")), (str(d.get("model_type")),)
    return None, names


def _rope(d: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, scaling dict with its rope_type, or None for default rope)."""
    params = d.get("rope_parameters")
    if params is not None:  # transformers 5
        theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta, scaling = d.get("rope_theta", 10000.0), d.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        scaling = None if kind == "default" else {**scaling, "rope_type": kind}
    return float(theta), scaling


def _sliding_window(arch: str | None, d: dict[str, Any]) -> int | None:
    """The window when it binds: Qwen2/3 only with use_sliding_window, others when it is
    shorter than the context."""
    window = d.get("sliding_window")
    if window is None or (arch in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
                          and not d.get("use_sliding_window", False)):
        return None
    return int(window) if window < int(d.get("max_position_embeddings", DEFAULT_CONTEXT)) else None


def _layer_types(d: dict[str, Any], layers: int) -> tuple[str, ...]:
    """config.json's `layer_types` (transformers' per-layer attention kind), one known kind
    (LAYER_TYPES) per layer, () when none is a sliding layer; InvalidModelConfig naming an
    unknown entry or a wrong length."""
    kinds = d.get("layer_types")
    if kinds is None:
        return ()
    if not isinstance(kinds, list | tuple) or len(kinds) != layers:
        raise InvalidModelConfig(f"layer_types must list one attention kind per layer "
                                 f"({layers}), got {kinds!r}")
    unknown = sorted({str(k) for k in kinds} - set(LAYER_TYPES))
    if unknown:
        raise InvalidModelConfig(f"layer_types entry {unknown[0]!r} is not an attention kind "
                                 f"this reader knows ({', '.join(LAYER_TYPES)})")
    # NOTE: every layer full is the default (a config that lists it reads as one that does not)
    return tuple(kinds) if "sliding_attention" in kinds else ()


def eos_token_ids(d: dict[str, Any]) -> tuple[int, ...]:
    """config.json's `eos_token_id` (an int or a list of ints; none when absent)."""
    eos = d.get("eos_token_id")
    if eos is None:
        return ()
    ids = eos if isinstance(eos, list) else [eos]
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise InvalidModelConfig(f"eos_token_id must be an int or a list of ints, got {eos!r}")
    return tuple(ids)
