"""Tensor-parallel layers (`exec.layers.parallel_linear`) on two gloo ranks equal the full layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from exec.distributed.tp_group import TPGroup
from exec.distributed.tp_launch import TPStartError, spawn
from exec.layers.parallel_linear import (
    RowParallelLinear,
    VocabParallelEmbedding,
    column_shard,
    shard_range,
    vocab_parallel_logits,
)


def _layers_agree(group: TPGroup, out_dir: str) -> None:
    torch.manual_seed(0)  # the same full layers on every rank
    col, row = nn.Linear(8, 12), nn.Linear(12, 8)
    emb, head = nn.Embedding(10, 8), torch.randn(10, 8)
    x, ids = torch.randn(5, 8), torch.tensor([0, 4, 5, 9, 3])
    qkv = column_shard(col, group, "heads", parts=(4, 4, 4))
    full_qkv = col(x).split(4, dim=-1)
    mine = [p[:, shard_range(4, group, "heads")] for p in full_qkv]
    torch.testing.assert_close(qkv(x), torch.cat(mine, dim=-1))
    torch.testing.assert_close(RowParallelLinear(row, group, "in")(
        col(x)[:, shard_range(12, group, "in")]), row(col(x)))
    torch.testing.assert_close(VocabParallelEmbedding(emb, group)(ids), emb(ids))
    logits = vocab_parallel_logits(x, head[shard_range(10, group, "vocab")], group)
    torch.testing.assert_close(logits, x @ head.t())
    with open(f"{out_dir}/rank{group.rank}", "w") as f:
        f.write("ok")


def test_sharded_layers_on_two_ranks_equal_the_full_layers(tmp_path):
    """Column shards (per part of a fused weight), row-parallel with all-reduce, vocabulary-
    parallel embedding and LM head give the full layers' results on each of 2 ranks."""
    spawn(2, _layers_agree, str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


def _fails_on_rank1(group: TPGroup) -> None:
    if group.rank == 1:
        raise ValueError("rank 1 broke")


def test_a_failing_rank_is_one_named_error():
    """An exception in a rank reaches the caller as TPStartError with its message."""
    with pytest.raises(TPStartError, match="rank 1 broke"):
        spawn(2, _fails_on_rank1)


def test_a_size_the_world_does_not_divide_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"num_key_value_heads \(3\) is not divisible by --tp 2"):
        shard_range(3, TPGroup(0, 2), "num_key_value_heads")
