"""batchtwin's real executor: Llama-family PyTorch models on a paged KV cache.

`Engine` is the offline entry point; `TorchModelRunner` implements the spec's
`ModelRunner` for any driver (the SimPy driver and the agreement tests build it directly
from `load_model`).
"""

from exec.engine import Engine, load_model
from exec.generate_output import GenerateOutput
from exec.llama import LlamaForCausalLM
from exec.model_config import ModelConfig, UnsupportedModelError
from exec.model_runner import TorchModelRunner

__all__ = ["Engine", "GenerateOutput", "LlamaForCausalLM", "ModelConfig", "TorchModelRunner",
           "UnsupportedModelError", "load_model"]
