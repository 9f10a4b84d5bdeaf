"""Moved: the Llama family is `exec.models.llama`, the model registry `exec.models`. This
module stays only while `exec.model_runner` imports `LlamaForCausalLM` and `TorchBatch` from
here; delete it once that import reads `from exec.models import CausalLM, TorchBatch`."""

from exec.models.llama import LlamaForCausalLM
from exec.models.torch_batch import TorchBatch

__all__ = ["LlamaForCausalLM", "TorchBatch"]
