"""A small random-weight Llama checkpoint (config.json + model.safetensors, no tokenizer):
the fall-back model of `batchtwin calibrate` and `fidelity` when SmolLM2 is not installed,
and a fast model for their tests. Seeded: the same seed writes the same weights."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from exec.llama import LlamaForCausalLM
from exec.model_config import ModelConfig


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


def write_tiny_checkpoint(folder: str | Path, c: TinyModelConfig = TinyModelConfig()) -> Path:
    """Write the checkpoint into `folder` (created) and return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = c.config_json()
    torch.manual_seed(c.seed)
    model = LlamaForCausalLM(ModelConfig.from_dict(config))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"))
    return folder
