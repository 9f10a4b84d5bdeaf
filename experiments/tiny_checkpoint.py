"""A small random-weight checkpoint (config.json + model.safetensors, no tokenizer): a Llama,
the fall-back model of `batchtwin calibrate` and `fidelity` when SmolLM2 is not installed and
a fast model for their tests, or a mixture of experts of the same sizes (`TINY_MOE`, the
MoE model of `python -m experiments.bench.bench_generate --model tiny-mixtral`). Seeded: the same
seed writes the same weights. Written by our model classes under Hugging Face's names, so
transformers loads it too."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from exec.models import model_class, runnable_config


@dataclass(frozen=True)
class TinyModelConfig:
    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0

    def config_json(self) -> dict:
        fields = {k: v for k, v in asdict(self).items() if k != "seed"}
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **fields,
                "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
                "eos_token_id": 0, "torch_dtype": "float32"}


# config.json fields over TinyModelConfig's: 8 experts, 2 per token, each as wide as the
# Llama's MLP (intermediate_size), every layer sparse.
TINY_MOE = {
    "tiny-mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                     "num_local_experts": 8, "num_experts_per_tok": 2},
    "tiny-qwen3-moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                       "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 768,
                       "norm_topk_prob": True, "head_dim": 32},
}


def write_tiny_checkpoint(folder: str | Path, c: TinyModelConfig = TinyModelConfig(),
                          moe: str | None = None) -> Path:
    """Write the checkpoint into `folder` (created) and return it; `moe` names a TINY_MOE
    architecture to write instead of the Llama."""
    config = {**c.config_json(), **(TINY_MOE[moe] if moe else {})}
    return write_random_checkpoint(folder, config, c.seed)


def write_random_checkpoint(folder: str | Path, config: dict, seed: int = 0) -> Path:
    """Random weights (matrices N(0, 0.02)) for any config.json our model classes build, in
    its `torch_dtype` (float32 when absent), written into `folder` (created)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    parsed = runnable_config(config)
    dtype = getattr(torch, str(config.get("torch_dtype", "float32")))
    model = model_class(parsed)(parsed).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"))
    return folder
