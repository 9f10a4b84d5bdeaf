"""Tiny random-weight checkpoints (Llama family, Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss), saved with transformers (the reference):
the tests' `tiny_checkpoint` fixture and `python -m experiments.dev.mutation_check` build them.

NOTE: weights are scaled up (x4 by default) so that logits are well separated: the gap
between the two best logits is far larger than float32 differences between our kernels
and transformers', so a greedy argmax never flips on rounding.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              eos_token_id=0)
# Mixtral: top-2 of 8 experts in every layer (expert width: intermediate_size).
MIXTRAL = {"num_local_experts": 8, "num_experts_per_tok": 2}
# Qwen3-MoE: layers 0 and 2 dense by decoder_sparse_step=2, layer 3 by mlp_only_layers, so
# layer 1 alone routes (top-2 of 8, renormalised); dense layers use intermediate_size.
QWEN3_MOE = {"head_dim": 32, "num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2,
             "moe_intermediate_size": 64, "norm_topk_prob": True, "decoder_sparse_step": 2,
             "mlp_only_layers": [3]}
# NOTE: Qwen3-MoE's float32 rounding grows fast with the scale (HF's own fp32 logits are
# 2e-4 off its float64 ones at x3, 7e-6 at x2), so its weights are scaled x2 only.
SCALES = {"qwen3_moe": 2.0, "deepseek_v3": 2.0}
# DeepSeek-V3: MLA (q and kv low-rank), YaRN rope with mscale, layer 0 dense
# (first_k_dense_replace), layers 1-2 route top-2 of 8 in 2 of 4 groups, plus a shared expert.
DEEPSEEK_V3 = {"num_hidden_layers": 3, "num_key_value_heads": 4, "q_lora_rank": 32,
               "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
               "v_head_dim": 16, "n_routed_experts": 8, "n_shared_experts": 1,
               "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
               "first_k_dense_replace": 1, "moe_intermediate_size": 32, "norm_topk_prob": True,
               "routed_scaling_factor": 2.5,
               "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "mscale": 1.0,
                                "mscale_all_dim": 1.0, "original_max_position_embeddings": 64,
                                "beta_fast": 32, "beta_slow": 1}}
# gpt-oss: sliding (window 6, so windows cross 4-token pages) then full attention, sinks,
# YaRN rope, top-2 of 8 biased experts with the clamped SwiGLU in both layers.
GPT_OSS = {"head_dim": 16, "num_local_experts": 8, "num_experts_per_tok": 2,
           "intermediate_size": 64, "sliding_window": 6,
           "layer_types": ["sliding_attention", "full_attention"],
           "rope_parameters": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0,
                               "beta_slow": 1.0, "original_max_position_embeddings": 64,
                               "rope_theta": 150000.0, "truncate": False}}
ARCHS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {"rope_scaling": LLAMA3_ROPE}),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {}),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, {"head_dim": 32}),
    "smollm2": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {"tie_word_embeddings": True}),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM, MIXTRAL),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM, QWEN3_MOE),
    "deepseek_v3": (transformers.DeepseekV3Config, transformers.DeepseekV3ForCausalLM, DEEPSEEK_V3),
    "gpt_oss": (transformers.GptOssConfig, transformers.GptOssForCausalLM, GPT_OSS),
}
# Parameters the reference initialises to zero (or near it) that a test should see at work.
NONZERO_SUFFIXES = ("e_score_correction_bias", "_proj_bias", "router.bias", ".sinks")


def make_checkpoint(folder: Path, arch: str = "llama", seed: int = 0, scale: float | None = None):
    """Save a tiny `arch` model into `folder`; returns the transformers model (eval, fp32).
    Weights are scaled by `scale` (default x4, `SCALES` where an arch needs less)."""
    config_cls, model_cls, extra = ARCHS[arch]
    scale = SCALES.get(arch, 4.0) if scale is None else scale
    torch.manual_seed(seed)
    model = model_cls(config_cls(**{**COMMON, **extra})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
        for name, t in (*model.named_buffers(), *model.named_parameters()):
            if name.endswith(NONZERO_SUFFIXES):   # zeros (or tiny) at init: make them count
                t.copy_(torch.rand(t.shape) * 0.5 if "correction" in name else torch.randn(t.shape))
    model.save_pretrained(folder)
    if hasattr(model.config, "num_experts_per_tok"):
        # NOTE: transformers' default grouped_mm experts refuse float64, the parity reference.
        model.set_experts_implementation("eager")
    return model


def hf_logits(model, token_ids: list[int]) -> torch.Tensor:
    """[len(token_ids), V] float32 logits of the reference model (teacher forcing)."""
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0].float()
