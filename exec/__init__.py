"""batchtwin's real executor: PyTorch models (the registry `exec.models`: Llama family,
Mixtral, Qwen3-MoE, DeepSeek-V3) on a paged KV cache.

`Engine` is the offline entry point; `TorchModelRunner` implements the spec's
`ModelRunner` for any driver (the SimPy driver and the agreement tests build it directly
from `load_model`).
"""

from exec.engine import Engine, load_model
from exec.generate_output import GenerateOutput
from exec.model_config import ModelConfig, UnsupportedModelError
from exec.model_runner import TorchModelRunner
from exec.models import MODELS, model_class
from exec.models.llama import LlamaForCausalLM

__all__ = ["MODELS", "Engine", "GenerateOutput", "LlamaForCausalLM", "ModelConfig",
           "TorchModelRunner", "UnsupportedModelError", "load_model", "model_class"]
