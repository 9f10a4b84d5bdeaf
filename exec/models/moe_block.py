"""`SparseMoeBlock`: a mixture-of-experts feed-forward (Mixtral, Qwen3-MoE). A router picks
each token's top-k experts by softmax score (renormalised over the k when the config says
so) and the experts run grouped by expert (`exec.layers.fused_experts`), as an engine runs them.

Until `fuse()` the weights sit under the checkpoint's names, so the loader fills them by
name: the router at `gate`, expert N's gated MLP at `experts.N.<gate>/<up>/<down>` (the
family names the three: Mixtral w1/w3/w2, Qwen gate_proj/up_proj/down_proj). `fuse()`
stacks them into `gate_up` [E, 2I, H] and `down` [E, H, I]; `pack()` pre-packs the router
only (the experts stay stacked tensors, indexed per expert).

Shapes: T tokens, H hidden, E experts, I expert width, k experts per token.
"""

from __future__ import annotations

import torch
from torch import nn

from exec.layers.fused_experts import fused_experts
from exec.layers.packed_linear import PackedLinear
from exec.models.model_config import ModelConfig, UnsupportedModelError
from shared.config.moe_config import MoEConfig

ExpertNames = tuple[str, str, str]   # the checkpoint's (gate, up, down) names of one expert


class Expert(nn.Module):
    """One routed expert's gated-MLP weights under the checkpoint's names (no forward: the
    block runs all experts grouped)."""

    def __init__(self, hidden: int, width: int, names: ExpertNames) -> None:
        super().__init__()
        self.names = names
        gate, up, down = names
        self.add_module(gate, nn.Linear(hidden, width, bias=False))
        self.add_module(up, nn.Linear(hidden, width, bias=False))
        self.add_module(down, nn.Linear(width, hidden, bias=False))

    def gate_up(self) -> torch.Tensor:
        gate, up, _ = self.names
        return torch.cat((self._modules[gate].weight, self._modules[up].weight))   # [2I, H]

    def down(self) -> torch.Tensor:
        return self._modules[self.names[2]].weight                                  # [H, I]


class SparseMoeBlock(nn.Module):
    def __init__(self, hidden: int, moe: MoEConfig, names: ExpertNames) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, moe.expert_intermediate_size, names)
                                     for _ in range(moe.num_experts))
        self.top_k, self.renormalise = moe.experts_per_token, moe.norm_topk_prob

    def fuse(self) -> None:
        """Stack the experts into `gate_up` / `down` (parameters, so `.to()` moves them)."""
        gate_up, down = self._stacked()
        self.gate_up = nn.Parameter(gate_up, requires_grad=False)    # [E, 2I, H]
        self.down = nn.Parameter(down, requires_grad=False)          # [E, H, I]
        del self.experts

    def pack(self) -> None:
        self.gate = PackedLinear.of(self.gate)

    def _stacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        if hasattr(self, "gate_up"):
            return self.gate_up, self.down
        with torch.no_grad():
            return (torch.stack([e.gate_up() for e in self.experts]),
                    torch.stack([e.down() for e in self.experts]))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [T, H] -> (expert ids [T, k] int64, float32 weights [T, k]), as transformers:
        softmax in float32 over all E, the top k, renormalised over them when configured."""
        probs = torch.softmax(self.gate(x).float(), dim=-1)               # [T, E]
        weights, ids = torch.topk(probs, self.top_k, dim=-1)              # [T, k] each
        if self.renormalise:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return ids, weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids, weights = self.route(x)
        gate_up, down = self._stacked()
        return fused_experts(x, gate_up, down, ids, weights)              # [T, H]


def check_routed_experts(config: ModelConfig, architecture: str, count_key: str) -> None:
    """Refuse, naming the field, a config a softmax top-k family cannot run: no expert
    count (a dense config under a MoE architecture), shared experts, or other scoring."""
    moe = config.moe
    if moe is None:
        raise UnsupportedModelError(f"{architecture} config.json has no {count_key!r} "
                                    f"(the number of routed experts)")
    if moe.shared_intermediate_size:
        raise UnsupportedModelError(f"{architecture} with shared experts "
                                    f"(shared_expert_intermediate_size) is not supported")
    if moe.scoring != "softmax":
        raise UnsupportedModelError(f"{architecture} routes by softmax; scoring "
                                    f"{moe.scoring!r} is not supported")
