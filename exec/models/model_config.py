"""`ModelConfig`: a Hugging Face config.json (`shared.config.hf_config.HFConfig`, the one reader)
restricted to what exec runs.

Covers the architectures the model registry lists (`exec.models.MODELS`): Llama 2/3
(llama3 rope scaling), Qwen2/2.5 (q/k/v bias), Qwen3 (q/k RMSNorm, explicit head_dim),
Mistral (no sliding window), SmolLM2 (tied embeddings), Mixtral and Qwen3-MoE (routed
experts), DeepSeek-V3 (MLA, grouped routing, yarn rope: the family checks its own rope),
gpt-oss (sliding-window layers named by `layer_types`, attention sinks, biased experts,
yarn rope).
Refused, with the reason: another architecture, an activation other than SiLU, a rope
scaling other than llama3 (or one missing its keys) for the families that do not check
their own, a sliding window shorter than the context without `layer_types`, and what a
family's `check_config` refuses (a MoE config without its routing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.config.hf_config import HFConfig, InvalidModelConfig


class UnsupportedModelError(InvalidModelConfig):
    """The checkpoint's architecture or a feature of it is not supported."""


@dataclass(frozen=True)
class ModelConfig(HFConfig):
    """An HFConfig as exec reads it; whether a registered family runs it is
    `exec.models.runnable_config`'s check (the refusals listed above)."""

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        return super().from_file(path)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        try:
            config = super().from_dict(d)
        except UnsupportedModelError:
            raise
        except InvalidModelConfig as e:
            raise UnsupportedModelError(str(e)) from None
        return config
