"""batchtwin's real executor: PyTorch models (the registry `exec.models`: Llama family,
Mixtral, Qwen3-MoE, DeepSeek-V3) on a paged KV cache.

`Engine` is the offline entry point; `TorchModelRunner` implements the spec's
`ModelRunner` for any driver (the SimPy driver and the agreement tests build it directly
from `load_model`).
"""

from exec.engine.engine import Engine, load_model
from exec.engine.generate_output import GenerateOutput
from exec.models import MODELS, model_class
from exec.models.llama import LlamaForCausalLM
from exec.models.model_config import ModelConfig, UnsupportedModelError
from exec.runner.model_runner import TorchModelRunner

__all__ = ["MODELS", "Engine", "GenerateOutput", "LlamaForCausalLM", "ModelConfig",
           "TorchModelRunner", "UnsupportedModelError", "load_model", "model_class"]
