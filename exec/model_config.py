"""`ModelConfig`: a Hugging Face config.json (`shared.config.hf_config.HFConfig`, the one reader)
restricted to what exec runs.

Covers the architectures the model registry lists (`exec.models.MODELS`): Llama 2/3
(llama3 rope scaling), Qwen2/2.5 (q/k/v bias), Qwen3 (q/k RMSNorm, explicit head_dim),
Mistral (no sliding window), SmolLM2 (tied embeddings), Mixtral and Qwen3-MoE (routed
experts), DeepSeek-V3 (MLA, grouped routing, yarn rope: the family checks its own rope).
Refused, with the reason: another architecture, an activation other than SiLU, a rope
scaling other than llama3 (or one missing its keys) for the families that do not check
their own, a sliding window shorter than the context, and what a family's `check_config`
refuses (a MoE config without its routing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.config.hf_config import HFConfig, InvalidModelConfig

LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
SUPPORTED_ROPE_TYPES = ("default", "llama3")


class UnsupportedModelError(InvalidModelConfig):
    """The checkpoint's architecture or a feature of it is not supported."""


@dataclass(frozen=True)
class ModelConfig(HFConfig):
    """An HFConfig exec can run (`from_dict` / `from_file` refuse the rest)."""

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
        _check_runnable(config)
        return config


def _check_runnable(c: ModelConfig) -> None:
    # NOTE: imported here because exec.models imports this module (its classes take a ModelConfig).
    from exec.models import model_class

    family = model_class(c)
    family.check_config(c)
    if c.hidden_act != "silu":
        raise UnsupportedModelError(f"hidden_act {c.hidden_act!r} is not supported (silu only)")
    # NOTE: a family that checks its own rope (DeepSeek-V3: yarn) sets `checks_rope`.
    if c.rope_scaling is not None and not getattr(family, "checks_rope", False):
        kind = c.rope_scaling["rope_type"]
        if kind not in SUPPORTED_ROPE_TYPES:
            raise UnsupportedModelError(f"rope scaling {kind!r} is not supported "
                                        f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
        missing = [k for k in LLAMA3_ROPE_KEYS if k not in c.rope_scaling]
        if missing:
            raise UnsupportedModelError(f"llama3 rope scaling is missing {', '.join(missing)}")
    if c.sliding_window is not None:
        raise UnsupportedModelError(
            f"sliding-window attention (sliding_window={c.sliding_window} < context "
            f"{c.context_length}) is not supported; batchtwin attends over the full context")
