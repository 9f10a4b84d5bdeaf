"""The model registry: one table from a config.json's `architectures` name to the class that
runs it. The safetensors loader (`exec.loading.model_files`), the GGUF loader (`exec.loading.gguf_loader`)
and the compiled decode (`exec.runner.compiled_decode`) build and call models through it, and
`runnable_config` refuses a config no family here runs. Configs are read once, by
`shared.config.hf_config.HFConfig` (whose family names are the lookup key, so a config giving
only `model_type` finds its class too).

Adding a family is one file in this folder (a `CausalLM`: reuse `exec.models.llama` and
choose the feed-forward of each layer, as `mixtral.py` does) plus one row in `MODELS`.

A row names the family's module and class (vLLM's registry does the same): a family's module
is imported when a config needs it, so a dense model does not pay for the MoE code's imports
(torch._dynamo, a second at start-up).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from exec.models.causal_lm import CausalLM
from exec.models.model_config import ModelConfig, UnsupportedModelError
from exec.models.torch_batch import TorchBatch
from shared.config.hf_config import ARCHITECTURES, HFConfig

# architectures name -> (module in exec.models, class)
MODELS: MappingProxyType[str, tuple[str, str]] = MappingProxyType({
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen3ForCausalLM": ("llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("llama", "LlamaForCausalLM"),
    "MixtralForCausalLM": ("mixtral", "MixtralForCausalLM"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    "DeepseekV3ForCausalLM": ("deepseek_v3", "DeepseekV3ForCausalLM"),
    "GptOssForCausalLM": ("gpt_oss", "GptOssForCausalLM"),
})
# NOTE: every registered name is one `shared.config.hf_config` reads (a KeyError here otherwise).
_BY_FAMILY = MappingProxyType({ARCHITECTURES[name]: row for name, row in MODELS.items()})
LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
SUPPORTED_ROPE_TYPES = ("default", "llama3")

__all__ = ["MODELS", "CausalLM", "TorchBatch", "check_runnable", "model_class", "runnable_config"]


def model_class(config: HFConfig) -> type[CausalLM]:
    """The class that runs `config`; UnsupportedModelError naming its architecture and
    listing the registered ones otherwise."""
    row = _BY_FAMILY.get(config.arch)
    if row is None:
        raise UnsupportedModelError(f"unsupported architecture {list(config.names)!r}; "
                                    f"batchtwin runs {', '.join(MODELS)}")
    module, name = row
    return getattr(importlib.import_module(f"exec.models.{module}"), name)


def runnable_config(source: str | Path | Mapping[str, Any]) -> ModelConfig:
    """The config at `source` (a config.json, its folder, or the dict) when a registered
    family runs it; UnsupportedModelError naming what is not supported otherwise."""
    if isinstance(source, Mapping):
        config = ModelConfig.from_dict(dict(source))
        check_runnable(config)
        return config
    config = ModelConfig.from_file(source)
    try:
        check_runnable(config)
    except UnsupportedModelError as e:   # NOTE: named by its file, as from_file names its errors
        path = Path(source)
        raise UnsupportedModelError(f"{path / 'config.json' if path.is_dir() else path}: {e}") from None
    return config


def check_runnable(c: ModelConfig) -> None:
    """UnsupportedModelError naming what of `c` no registered family runs (module doc of
    `exec.models.model_config`)."""
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
    # NOTE: a window is run per layer as `layer_types` lists it (gpt-oss); a window without
    # them (Mistral v0.1, Qwen's max_window_layers) is not.
    if c.sliding_window is not None and not c.layer_types:
        raise UnsupportedModelError(
            f"sliding-window attention (sliding_window={c.sliding_window} < context "
            f"{c.context_length}) without layer_types is not supported; batchtwin runs a "
            f"window on the layers config.json's layer_types names")
