"""`CompiledDecode`: the decode forward compiled with torch.compile (inductor), the CPU
counterpart of SGLang's `--enable-torch-compile` (opt-in: `Engine(torch_compile=True)`).

Why: at batch 1 an eager CPU decode step of SmolLM2-135M is some 700 small ops (norms,
rotary, casts, residual adds, KV writes, attention) around 121 matmuls, and their dispatch
costs about as much as streaming the weights. Inductor fuses them into a few C++ kernels
per layer and calls the pre-packed oneDNN matmuls from one generated C++ wrapper
(`cpp_wrapper`: no Python between the 300-odd calls of a step).

How: the whole model is compiled with `freezing` (weights become constants, which
inductor's oneDNN linear lowering needs for `exec.layers.packed_linear.PackedLinear`). Shapes are
static except the ones that move: the key length (marked dynamic before every call, so one
graph serves every step) and, above batch 1, the batch size (batch 1 is a graph of its
own). Static head counts and pool sizes keep the guard check at some 0.15 ms a call
(0.4 ms with every dimension dynamic). Only decode batches use it
(`TorchModelRunner(torch_compile_max_bs=...)` bounds their size): prefill layouts vary
too much for graphs to pay. Guards on the modules are skipped: weights never change after
loading. Cost: 45-60 s of compiling per graph on 2 cores, in every process (the `Engine`
compiles its graphs when it is built, as SGLang does at start-up): inductor's FX
graph cache skips graphs that hold oneDNN-packed (mkldnn) weights, so only the C++ build is
reused from disk.
Measured on SmolLM2-135M bf16, 2 threads, alternating processes: a batch-1 decode step
13.3-14.3 ms eager against 9.8-10.6 ms compiled (one reading 13.2); 32 requests x 128 tokens
at 762-862 tokens/s compiled against 668-767 eager (`torch_compile_max_bs` 32 against 1),
hence SGLang's default bound of 32.
"""

from __future__ import annotations

import torch
from torch import nn

from exec.models import CausalLM, TorchBatch


class _Forward(nn.Module):
    """The model's own forward (its class's, for any registered model), so that patching
    `model.forward` on the instance cannot recurse into it."""

    def __init__(self, model: CausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: TorchBatch) -> torch.Tensor:
        return type(self.model).forward(self.model, input_ids, positions, batch)


class CompiledDecode:
    """Call as the model: (input_ids [B], positions [B], TorchBatch) -> hidden [B, H]."""

    def __init__(self, model: CausalLM) -> None:
        options = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        self.fn = torch.compile(_Forward(model), dynamic=None, options=options)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: TorchBatch) -> torch.Tensor:
        _mark_dynamic(input_ids, positions, batch)
        # NOTE: inductor settings in torch.compile's `options` are not all honoured (torch
        # 2.13: `freezing` is not); any call may compile, so each runs under the patch.
        # NOTE: imported on use: importing inductor costs every Engine 1.6 s of start-up.
        import torch._inductor.config as inductor_config

        with inductor_config.patch(freezing=True, cpp_wrapper=True):
            return self.fn(input_ids, positions, batch)


def _mark_dynamic(input_ids: torch.Tensor, positions: torch.Tensor, batch: TorchBatch) -> None:
    """Mark the dimensions that change between decode steps: the key length S of the
    attention layout (kv_index [B, S], mask [B, 1, 1, S]) and, above 1, the batch size."""
    many = input_ids.shape[0] > 1
    for g in batch.attention.groups:
        masks = (g.mask,) if g.window_mask is None else (g.mask, g.window_mask)
        torch._dynamo.mark_dynamic(g.kv_index, 1)
        for m in masks:
            torch._dynamo.mark_dynamic(m, 3)
        if many:
            for t in (g.kv_index, *masks, g.q_index, g.out_index):
                torch._dynamo.mark_dynamic(t, 0)
    if many:
        for t in (input_ids, positions, batch.out_cache_loc):
            torch._dynamo.mark_dynamic(t, 0)
