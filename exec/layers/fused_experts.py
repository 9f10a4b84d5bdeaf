"""`fused_experts`: the routed experts of a MoE layer, run the way an engine runs them
(SGLang's `fused_moe`): the (token, expert) pairs are grouped by expert, each active expert
does one gated-MLP matmul over its tokens, and the outputs are summed back per token with
their routing weights. No per-token Python loop; the loop is over active experts.

Shapes: T tokens, H hidden, E experts, I expert width, k experts per token.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

# (gate [n, I], up [n, I]) -> [n, I]
Activation = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The gated MLP's activation (SGLang's `SiluAndMul`): silu(gate) * up."""
    return nn.functional.silu(gate) * up


# NOTE: run eagerly inside a compiled forward (exec.runner.compiled_decode): each expert's group size
# is data (`counts`), and tracing it would specialise, and recompile, on every routing.
@torch.compiler.disable
def fused_experts(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                  topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  activation: Activation = silu_and_mul, gate_up_bias: torch.Tensor | None = None,
                  down_bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [T, H]; gate_up: [E, 2I, H] (gate rows first, then up); down: [E, H, I];
    topk_ids: [T, k] int64 expert ids; topk_weights: [T, k]; biases (gpt-oss) [E, 2I] and
    [E, H]. Returns [T, H] in x's dtype: sum_j topk_weights[t, j] * expert_e(x_t),
    e = topk_ids[t, j], expert_e(x) = down_e(activation(gate_e(x), up_e(x)))."""
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1)                                   # [T*k]
    order = torch.argsort(flat, stable=True)                      # pairs grouped by expert
    counts = torch.bincount(flat, minlength=gate_up.shape[0]).tolist()
    tokens = order // k                                           # [T*k] token of each pair
    weights = topk_weights.reshape(-1)[order].to(x.dtype)         # [T*k]
    out = torch.zeros_like(x)                                     # [T, H]
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        rows = tokens[start:start + n]                            # [n]
        h = x[rows] @ gate_up[e].t()                              # [n, 2I]
        if gate_up_bias is not None:
            h = h + gate_up_bias[e]
        y = activation(*h.chunk(2, dim=-1)) @ down[e].t()         # [n, H]
        if down_bias is not None:
            y = y + down_bias[e]
        out.index_add_(0, rows, y * weights[start:start + n, None])
        start += n
    return out
