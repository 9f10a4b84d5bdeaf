"""`CompiledDecode`: the decode forward compiled with torch.compile (inductor), the CPU
counterpart of SGLang's `--enable-torch-compile` (opt-in: `Engine(torch_compile=True)`).

Why: at batch 1 an eager CPU decode step of SmolLM2-135M is some 700 small ops (norms,
rotary, casts, residual adds, KV writes, attention) around 121 matmuls, and their dispatch
costs about as much as streaming the weights. Inductor fuses them into a few C++ kernels
per layer and calls the pre-packed oneDNN matmuls from one generated wrapper.

How: the whole model is compiled with `freezing` (weights become constants, which
inductor's oneDNN linear lowering needs for `exec.packed_linear.PackedLinear`) and dynamic
shapes (the key length grows every step; batch 1 and larger batches are two graphs). Only
decode batches use it (`TorchModelRunner(torch_compile_max_bs=...)` bounds their size):
prefill layouts vary too much for graphs to pay. Guards on the modules are skipped: weights
never change after loading. Cost: some 70 s (batch 1) and 100 s (larger batches) of
compiling on 2 cores the first time; inductor caches the code on disk for later runs.
Measured on SmolLM2-135M bf16, 2 threads: a batch-1 decode step 14.5-17.6 ms eager, 11.1-13.1
ms compiled (same process, interleaved); batch 32 is slower compiled (320 against 470-700
tokens/s), hence the default bound of 1.
"""

from __future__ import annotations

import torch
import torch._inductor.config as inductor_config
from torch import nn

from exec.llama import LlamaForCausalLM, TorchBatch


class _Forward(nn.Module):
    """The model's own forward, so that patching `model.forward` cannot recurse into it."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: TorchBatch) -> torch.Tensor:
        return LlamaForCausalLM.forward(self.model, input_ids, positions, batch)


class CompiledDecode:
    """Call as the model: (input_ids [B], positions [B], TorchBatch) -> hidden [B, H]."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        options = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        self.fn = torch.compile(_Forward(model), dynamic=True, options=options)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: TorchBatch) -> torch.Tensor:
        # NOTE: `freezing` in torch.compile's `options` is not honoured (torch 2.13); any
        # call may compile (a new batch-size class), so each runs under the config patch.
        with inductor_config.patch(freezing=True):
            return self.fn(input_ids, positions, batch)
