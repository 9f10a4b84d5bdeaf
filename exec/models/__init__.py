"""The model registry: one table from a config.json's `architectures` name to the class that
runs it. The safetensors loader (`exec.model_files`), the GGUF loader (`exec.gguf_loader`)
and the compiled decode (`exec.compiled_decode`) build and call models through it, and
`exec.model_config` refuses an architecture it does not list. Configs are read once, by
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

from exec.model_config import UnsupportedModelError
from exec.models.causal_lm import CausalLM
from exec.models.torch_batch import TorchBatch
from shared.config.hf_config import ARCHITECTURES, HFConfig

# architectures name -> (module in exec.models, class)
MODELS: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen3ForCausalLM": ("llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("llama", "LlamaForCausalLM"),
    "MixtralForCausalLM": ("mixtral", "MixtralForCausalLM"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    "DeepseekV3ForCausalLM": ("deepseek_v3", "DeepseekV3ForCausalLM"),
}
# NOTE: every registered name is one `shared.config.hf_config` reads (a KeyError here otherwise).
_BY_FAMILY = {ARCHITECTURES[name]: row for name, row in MODELS.items()}

__all__ = ["MODELS", "CausalLM", "TorchBatch", "model_class"]


def model_class(config: HFConfig) -> type[CausalLM]:
    """The class that runs `config`; UnsupportedModelError naming its architecture and
    listing the registered ones otherwise."""
    row = _BY_FAMILY.get(config.arch)
    if row is None:
        raise UnsupportedModelError(f"unsupported architecture {list(config.names)!r}; "
                                    f"batchtwin runs {', '.join(MODELS)}")
    module, name = row
    return getattr(importlib.import_module(f"exec.models.{module}"), name)
