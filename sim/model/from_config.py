"""Model shapes by name: `get_model_shape` reads an embedded short key
(`sim.model.embedded_configs`), a config.json path or a config dict into a `ModelShape`
(`sim.model.shape`) through the shared reader `shared.config.hf_config.HFConfig`, which reads the
dense sizes, the mixture-of-experts routing, MLA and the checkpoint's `quantization_config`.

Llama-4 (`Llama4ForConditionalGeneration`, its language model in `text_config`; or a flat
`llama4_text` config) is read as the Qwen-MoE layout the shared reader knows (`text_config`
below): `intermediate_size_mlp` is the dense layers' MLP, `intermediate_size` both the routed
experts' and the one shared expert's width, and every `interleave_moe_layer_step`-th layer
(or the listed `moe_layers`) is sparse. Its chunked attention (each token of a RoPE layer sees
only its own `attention_chunk_size` chunk; Maverick: 3 of 4 layers, chunks of 8192) is priced
as full attention, in FLOPs and in KV bytes: exact while sequences stay below
attention_chunk_size, an over-estimate beyond (ModelShape has no per-layer attention span to
cap). The KV cache holds every layer's full history, as SGLang does without its hybrid
chunked cache. The vision tower is not priced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shared.config.hf_config import HFConfig, InvalidModelConfig
from sim.hardware.precision import (
    DTYPE_ALIASES,
    DTYPE_BYTES,
    canonical_dtype,
    checkpoint_weight_dtype,
)
from sim.model.embedded_configs import EMBEDDED_CONFIGS, config_dict
from sim.model.shape import ModelShape, causal_pairs
from sim.model.weight_formats import UNQUANTIZED_BY_DEFAULT, unquantized_groups

__all__ = ["DTYPE_ALIASES", "DTYPE_BYTES", "EMBEDDED_CONFIGS", "ModelShape", "canonical_dtype",
           "causal_pairs", "config_dict", "embedded_configs", "get_model_shape",
           "shape_from_config", "text_config"]

LLAMA4_ARCHITECTURES = ("Llama4ForConditionalGeneration", "Llama4ForCausalLM")
LLAMA4_MODEL_TYPES = ("llama4", "llama4_text")
LLAMA4_DENSE_MLP_DEFAULT = 16384   # transformers' Llama4TextConfig.intermediate_size_mlp


def embedded_configs() -> dict[str, dict[str, Any]]:
    """The embedded config.json excerpts by short key (fresh, plain copies each call)."""
    return {k: config_dict(k) for k in EMBEDDED_CONFIGS}


def get_model_shape(key_or_path_or_dict: str | os.PathLike[str] | Mapping[str, Any],
                    weight_dtype: str | None = None, kv_dtype: str = "bf16") -> ModelShape:
    """A ModelShape from an embedded short key, a config.json path (file or its folder), or a
    config dict. `weight_dtype` None: the checkpoint's (`sim.hardware.precision`). Unknown keys raise
    ValueError listing the known ones."""
    source = key_or_path_or_dict
    if isinstance(source, Mapping):
        config, name = dict(source), str(source.get("_name_or_path", "config"))
    elif os.fspath(source) in EMBEDDED_CONFIGS:
        name = os.fspath(source)
        config = config_dict(name)
    else:
        config, name = read_config(Path(source)), os.fspath(source)
    return shape_from_config(config, name, weight_dtype, kv_dtype)


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in a config.json (or the folder holding one); ValueError otherwise."""
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
                      weight_dtype: str | None = None, kv_dtype: str = "bf16") -> ModelShape:
    """Read a config.json dict through the shared reader (`shared.config.hf_config.HFConfig`).

    NOTE: sliding-window layers (`layer_types`, or every layer when a window binds without
    them) are priced over their window (`sim.model.sliding_window`); Llama-4's chunked
    attention as full attention (an upper bound; exact below the chunk), and an architecture
    outside the known families as the shape its sizes give."""
    try:
        c = HFConfig.from_dict(text_config(config))
    except InvalidModelConfig as e:
        raise ValueError(f"{name}: {e} (a config needs hidden_size, num_hidden_layers, "
                         f"num_attention_heads, intermediate_size, vocab_size, and the MoE "
                         f"routing and MLA fields its family uses)") from None
    checkpoint = checkpoint_weight_dtype(c.quantization)
    unquantized = (UNQUANTIZED_BY_DEFAULT if c.quantization is None
                   else unquantized_groups(c.quantization.modules_to_not_convert))
    sliding = (c.layer_types.count("sliding_attention") if c.layer_types
               else c.num_layers if c.sliding_window else 0) if c.sliding_window else 0
    return ModelShape(
        name=name, hidden_size=c.hidden_size, num_layers=c.num_layers, num_heads=c.num_heads,
        num_kv_heads=c.num_kv_heads, head_dim=c.head_dim, intermediate_size=c.intermediate_size,
        vocab_size=c.vocab_size, tie_word_embeddings=c.tie_word_embeddings,
        max_position_embeddings=c.max_position_embeddings, qkv_bias=c.qkv_bias,
        qk_norm=c.qk_norm, weight_dtype=checkpoint if weight_dtype is None else weight_dtype,
        kv_dtype=kv_dtype, moe=c.moe, mla=c.mla, unquantized=unquantized,
        sliding_window=c.sliding_window if sliding else None, sliding_layers=sliding)


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config dict: a Llama-4 config rewritten into the Qwen-MoE field
    names (module doc), any other config as it is."""
    text = dict(config.get("text_config") or config)
    names = tuple(config.get("architectures") or ())
    if not (set(names) & set(LLAMA4_ARCHITECTURES)
            or config.get("model_type") in LLAMA4_MODEL_TYPES):
        return dict(config)
    text.setdefault("tie_word_embeddings", bool(config.get("tie_word_embeddings", False)))
    expert = text.get("intermediate_size")
    text.update(architectures=["Llama4ForCausalLM"],
                intermediate_size=text.get("intermediate_size_mlp", LLAMA4_DENSE_MLP_DEFAULT),
                moe_intermediate_size=expert, shared_expert_intermediate_size=expert,
                **_llama4_sparse_layers(text))
    return text


def _llama4_sparse_layers(text: dict[str, Any]) -> dict[str, Any]:
    """Llama-4's MoE layers in Qwen-MoE's terms: the listed `moe_layers`, else every
    interleave_moe_layer_step-th layer (layers step-1, 2*step-1, ..., as transformers)."""
    moe_layers = text.get("moe_layers")
    if moe_layers is None:
        return {"decoder_sparse_step": text.get("interleave_moe_layer_step", 1),
                "mlp_only_layers": []}
    moe, layers = set(moe_layers), int(text.get("num_hidden_layers") or 0)
    return {"decoder_sparse_step": 1, "mlp_only_layers": [i for i in range(layers) if i not in moe]}
