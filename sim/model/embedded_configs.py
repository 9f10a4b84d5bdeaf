"""config.json excerpts embedded by short key, so `--model KEY` needs no download. Each entry
copies the published config.json of the Hugging Face repo named beside it (the fields the
shared reader `shared.config.hf_config` and the simulator use); `config_dict(key)` is a fresh, plain
(JSON-ready) copy. A multimodal checkpoint (Llama-4) keeps its published layout, the language
model nested in `text_config` (`sim.model.from_config.text_config` reads it); its vision_config is
left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_F = MappingProxyType
_GPT_OSS_LAYER_TYPES = ("sliding_attention", "full_attention") * 18
_GPT_OSS_MXFP4 = _F({"quant_method": "mxfp4", "modules_to_not_convert": (
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head")})
_GPT_OSS_ROPE = _F({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                    "original_max_position_embeddings": 4096, "truncate": False})
# Llama-4: 1 = a RoPE layer with chunked attention, 0 = a NoPE layer with global attention
# (transformers' Llama4TextConfig default for no_rope_layer_interval 4).
_LLAMA4_NO_ROPE_LAYERS = (1, 1, 1, 0) * 12
_LLAMA31_ROPE = _F({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


def config_dict(key: str) -> dict[str, Any]:
    """The embedded config `key` as plain dicts and lists (KeyError for an unknown key)."""
    return _thaw(EMBEDDED_CONFIGS[key])


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_thaw(v) for v in value]
    return value


EMBEDDED_CONFIGS = _F({
    "llama-3-8b": _F({  # meta-llama/Meta-Llama-3-8B config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "eos_token_id": 128001}),
    "llama-3-70b": _F({  # meta-llama/Meta-Llama-3-70B config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 28672, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "eos_token_id": 128001}),
    "qwen2.5-7b": _F({  # Qwen/Qwen2.5-7B-Instruct config.json
        "architectures": ("Qwen2ForCausalLM",), "model_type": "qwen2", "hidden_size": 3584,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "eos_token_id": 151645}),
    "qwen2.5-72b": _F({  # Qwen/Qwen2.5-72B-Instruct config.json
        "architectures": ("Qwen2ForCausalLM",), "model_type": "qwen2", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 29568, "vocab_size": 152064, "tie_word_embeddings": False,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "eos_token_id": 151645}),
    "qwen3-8b": _F({  # Qwen/Qwen3-8B config.json
        "architectures": ("Qwen3ForCausalLM",), "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
        "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "eos_token_id": 151645}),
    "qwen3-32b": _F({  # Qwen/Qwen3-32B config.json
        "architectures": ("Qwen3ForCausalLM",), "model_type": "qwen3", "hidden_size": 5120,
        "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936,
        "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "eos_token_id": 151645}),
    "smollm2-135m": _F({  # HuggingFaceTB/SmolLM2-135M config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192, "rope_theta": 100000.0,
        "eos_token_id": 0}),
    "llama-3.1-405b": _F({  # meta-llama/Llama-3.1-405B config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 16384,
        "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
        "intermediate_size": 53248, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": _F({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        "eos_token_id": 128001}),
    "llama-3.1-8b": _F({  # meta-llama/Llama-3.1-8B config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": _LLAMA31_ROPE, "eos_token_id": 128001}),
    "llama-3.1-70b": _F({  # meta-llama/Llama-3.1-70B config.json (Llama-3.3-70B: the same)
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 28672, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": _LLAMA31_ROPE, "eos_token_id": 128001}),
    "llama-2-7b": _F({  # meta-llama/Llama-2-7b-hf config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "intermediate_size": 11008, "vocab_size": 32000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "eos_token_id": 2}),
    "llama-2-13b": _F({  # meta-llama/Llama-2-13b-hf config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 5120,
        "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 40,
        "intermediate_size": 13824, "vocab_size": 32000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "eos_token_id": 2}),
    "llama-2-70b": _F({  # meta-llama/Llama-2-70b-hf config.json
        "architectures": ("LlamaForCausalLM",), "model_type": "llama", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 28672, "vocab_size": 32000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "eos_token_id": 2}),
    "mixtral-8x22b": _F({  # mistralai/Mixtral-8x22B-v0.1 config.json
        "architectures": ("MixtralForCausalLM",), "model_type": "mixtral", "hidden_size": 6144,
        "num_hidden_layers": 56, "num_attention_heads": 48, "num_key_value_heads": 8,
        "intermediate_size": 16384, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 65536,
        "rope_theta": 1000000.0, "sliding_window": None, "eos_token_id": 2}),
    "mixtral-8x7b": _F({  # mistralai/Mixtral-8x7B-v0.1 config.json
        "architectures": ("MixtralForCausalLM",), "model_type": "mixtral", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "sliding_window": None, "eos_token_id": 2}),
    "qwen3-30b-a3b": _F({  # Qwen/Qwen3-30B-A3B config.json
        "architectures": ("Qwen3MoeForCausalLM",), "model_type": "qwen3_moe",
        "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": (),
        "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "use_sliding_window": False, "eos_token_id": 151645}),
    "qwen3-235b-a22b": _F({  # Qwen/Qwen3-235B-A22B config.json
        "architectures": ("Qwen3MoeForCausalLM",), "model_type": "qwen3_moe",
        "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
        "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": (),
        "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "use_sliding_window": False, "eos_token_id": 151645}),
    "deepseek-v3": _F({  # deepseek-ai/DeepSeek-V3 config.json
        "architectures": ("DeepseekV3ForCausalLM",), "model_type": "deepseek_v3",
        "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8, "topk_group": 4,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 129280, "tie_word_embeddings": False, "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": _F({"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                            "mscale": 1.0, "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 4096}),
        "quantization_config": _F({"quant_method": "fp8", "fmt": "e4m3",
                                   "activation_scheme": "dynamic",
                                   "weight_block_size": (128, 128)}),
        "bos_token_id": 0, "eos_token_id": 1}),
    "gpt-oss-120b": _F({  # openai/gpt-oss-120b config.json
        "architectures": ("GptOssForCausalLM",), "model_type": "gpt_oss", "hidden_size": 2880,
        "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
        "num_experts_per_tok": 4, "experts_per_token": 4, "attention_bias": True,
        "vocab_size": 201088, "tie_word_embeddings": False, "max_position_embeddings": 131072,
        "rope_theta": 150000, "sliding_window": 128, "layer_types": _GPT_OSS_LAYER_TYPES,
        "rope_scaling": _GPT_OSS_ROPE, "quantization_config": _GPT_OSS_MXFP4,
        "eos_token_id": 200002}),
    "gpt-oss-20b": _F({  # openai/gpt-oss-20b config.json
        "architectures": ("GptOssForCausalLM",), "model_type": "gpt_oss", "hidden_size": 2880,
        "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
        "num_experts_per_tok": 4, "experts_per_token": 4, "attention_bias": True,
        "vocab_size": 201088, "tie_word_embeddings": False, "max_position_embeddings": 131072,
        "rope_theta": 150000, "sliding_window": 128,
        "layer_types": ("sliding_attention", "full_attention") * 12,
        "rope_scaling": _GPT_OSS_ROPE, "quantization_config": _GPT_OSS_MXFP4,
        "eos_token_id": 200002}),
    "llama-4-maverick": _F({  # meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json
        "architectures": ("Llama4ForConditionalGeneration",), "model_type": "llama4",
        "tie_word_embeddings": False,
        "text_config": _F({
            "model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
            "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "attention_chunk_size": 8192, "no_rope_layers": _LLAMA4_NO_ROPE_LAYERS,
            "use_qk_norm": False, "attention_bias": False, "vocab_size": 202048,
            "max_position_embeddings": 1048576, "rope_theta": 500000.0, "rope_scaling": None,
            "rms_norm_eps": 1e-05, "bos_token_id": 200000,
            "eos_token_id": (200001, 200007, 200008), "pad_token_id": 200018})}),
})
