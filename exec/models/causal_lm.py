"""`CausalLM`: what the runner, both loaders and the compiled decode ask of a registered
model (`exec.models.MODELS`). Every family is an nn.Module built as `cls(config)` whose
`state_dict()` names are the Hugging Face checkpoint's, so weights load by name."""

from __future__ import annotations

from typing import Protocol

import torch

from exec.models.model_config import ModelConfig
from exec.models.torch_batch import TorchBatch


class CausalLM(Protocol):
    config: ModelConfig

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Raise UnsupportedModelError naming what of `config` this family cannot run."""

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                forward_batch: TorchBatch) -> torch.Tensor:
        """input_ids, positions: [T] int64 -> final-norm hidden states [T, H]."""

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, H] -> float32 logits [R, V]."""

    def prepare_for_inference(self, column_major: bool = False, pack: bool = False) -> None:
        """Fuse / stack / pre-pack weights once, after loading (idempotent)."""
