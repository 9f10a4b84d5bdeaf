"""The model registry: one table from a config.json's `architectures` name to the class that
runs it. The safetensors loader (`exec.model_files`), the GGUF loader (`exec.gguf_loader`)
and the compiled decode (`exec.compiled_decode`) build and call models through it, and
`exec.model_config` refuses an architecture it does not list. Configs are read once, by
`shared.hf_config.HFConfig` (whose family names are the lookup key, so a config giving
only `model_type` finds its class too).

Adding a family is one file in this folder (a `CausalLM`: reuse `exec.models.llama` and
choose the feed-forward of each layer, as `mixtral.py` does) plus one row in `MODELS`.
"""

from __future__ import annotations

from exec.model_config import UnsupportedModelError
from exec.models.causal_lm import CausalLM
from exec.models.llama import LlamaForCausalLM
from exec.models.mixtral import MixtralForCausalLM
from exec.models.qwen3_moe import Qwen3MoeForCausalLM
from exec.models.torch_batch import TorchBatch
from shared.hf_config import ARCHITECTURES, HFConfig

MODELS: dict[str, type[CausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "MixtralForCausalLM": MixtralForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
}
# NOTE: every registered name is one `shared.hf_config` reads (a KeyError here otherwise).
_BY_FAMILY = {ARCHITECTURES[name]: cls for name, cls in MODELS.items()}

__all__ = ["MODELS", "CausalLM", "TorchBatch", "model_class"]


def model_class(config: HFConfig) -> type[CausalLM]:
    """The class that runs `config`; UnsupportedModelError naming its architecture and
    listing the registered ones otherwise."""
    cls = _BY_FAMILY.get(config.arch)
    if cls is None:
        raise UnsupportedModelError(f"unsupported architecture {list(config.names)!r}; "
                                    f"batchtwin runs {', '.join(MODELS)}")
    return cls
