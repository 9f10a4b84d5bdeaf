"""Tensor-parallel layers (Megatron's split, as SGLang and vLLM do it): each rank keeps a
shard of a full `nn.Linear` / `nn.Embedding` loaded from the checkpoint.

- `column_shard`: output features split over ranks (q/k/v, gate/up): no communication; the
  rank computes its heads or its slice of the MLP.
- `RowParallelLinear`: input features split (o_proj, down_proj): partial sums all-reduced.
- `VocabParallelEmbedding`: vocabulary rows split; a rank looks up the ids it owns, zeros
  elsewhere, and the all-reduce sums one non-zero row per token.
- `vocab_parallel_logits`: the LM head's vocabulary split, logits all-gathered.

`parts` is a tuple of sizes when one weight holds several logical matrices along the split
dimension (a fused qkv or gate_up): each part is split on its own, so rank r keeps the r-th
slice of each.
"""

from __future__ import annotations

import torch
from torch import nn

from exec.distributed.tp_group import TPGroup


def shard_range(n: int, group: TPGroup, what: str) -> slice:
    """Rank `group.rank`'s contiguous 1/world slice of `n`; ValueError naming `what` when
    the world does not divide it."""
    if n % group.world_size:
        raise ValueError(f"tensor parallelism: {what} ({n}) is not divisible by --tp "
                         f"{group.world_size}")
    size = n // group.world_size
    return slice(group.rank * size, (group.rank + 1) * size)


def _rows(w: torch.Tensor, parts: tuple[int, ...], group: TPGroup, what: str) -> torch.Tensor:
    """Rows of each part of w [sum(parts), ...] for this rank, concatenated."""
    chunks, start = [], 0
    for p in parts:
        chunks.append(w[start:start + p][shard_range(p, group, what)])
        start += p
    return torch.cat(chunks)


def column_shard(linear: nn.Linear, group: TPGroup, what: str,
                 parts: tuple[int, ...] | None = None) -> nn.Linear:
    """This rank's output-feature shard of `linear` (weight [out/world, in])."""
    parts = parts or (linear.out_features,)
    out = nn.Linear(linear.in_features, sum(parts) // group.world_size, bias=linear.bias is not None,
                    device=linear.weight.device, dtype=linear.weight.dtype)
    with torch.no_grad():
        out.weight.copy_(_rows(linear.weight, parts, group, what))
        if linear.bias is not None:
            out.bias.copy_(_rows(linear.bias, parts, group, what))
    return out


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_shard @ W_shard^T) + b, with x's features split over ranks."""

    def __init__(self, linear: nn.Linear, group: TPGroup, what: str) -> None:
        super().__init__()
        cols = shard_range(linear.in_features, group, what)
        self.group = group
        self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone(), requires_grad=False)
        self.bias = linear.bias  # added once, after the reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.group.all_reduce(nn.functional.linear(x, self.weight))   # [T, out]
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Embedding rows [V/world, H] of this rank; out-of-shard ids contribute zeros."""

    def __init__(self, embedding: nn.Embedding, group: TPGroup) -> None:
        super().__init__()
        rows = shard_range(embedding.num_embeddings, group, "vocab_size")
        self.group, self.start, self.end = group, rows.start, rows.stop
        self.weight = nn.Parameter(embedding.weight.detach()[rows].clone(), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mine = (ids >= self.start) & (ids < self.end)                     # [T]
        local = torch.where(mine, ids - self.start, torch.zeros_like(ids))
        x = nn.functional.embedding(local, self.weight) * mine[:, None].to(self.weight.dtype)
        return self.group.all_reduce(x)                                   # [T, H]


def vocab_parallel_logits(hidden: torch.Tensor, weight_shard: torch.Tensor,
                          group: TPGroup) -> torch.Tensor:
    """hidden [R, H] times this rank's LM-head rows [V/world, H]: full logits [R, V] float32."""
    return group.all_gather_last(nn.functional.linear(hidden, weight_shard).float())
