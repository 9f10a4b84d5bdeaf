"""Tiny random-weight Llama-family checkpoints, saved with transformers (the reference):
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
ARCHS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {"rope_scaling": LLAMA3_ROPE}),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {}),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, {"head_dim": 32}),
    "smollm2": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {"tie_word_embeddings": True}),
}


def make_checkpoint(folder: Path, arch: str = "llama", seed: int = 0, scale: float = 4.0):
    """Save a tiny `arch` model into `folder`; returns the transformers model (eval, fp32)."""
    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**COMMON, **extra)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    model.save_pretrained(folder)
    return model


def hf_logits(model, token_ids: list[int]) -> torch.Tensor:
    """[len(token_ids), V] float32 logits of the reference model (teacher forcing)."""
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0].float()
