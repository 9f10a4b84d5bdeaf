"""`TPGroup`: the tensor-parallel process group a sharded model computes in, on
`torch.distributed` (gloo on CPU, NCCL on CUDA). It is passed to the modules that need a
collective; nothing reads a global group. `TPGroup.single()` is the world of one, whose
collectives are no-ops, so the unsharded model runs the same code.

A rank that fails (`fail`) posts its error in the world's rendezvous store, unless a rank
posted one first, and leaves the group. A peer whose collective broke because of it fails
with the same first failure: every rank reports the rank that failed first, not the
collective that broke after it (`exec.distributed.tp_launch` ends the followers once one is posted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

FAILURE_KEY = "batchtwin/tp-failure"  # the store key holding a world's first failure


@dataclass(frozen=True)
class TPGroup:
    rank: int
    world_size: int
    # the world's rendezvous store (`exec.distributed.tp_launch.spawn`'s); None: failures are not shared
    store: dist.Store | None = field(default=None, compare=False, repr=False)

    @classmethod
    def single(cls) -> TPGroup:
        return cls(0, 1)

    @classmethod
    def current(cls) -> TPGroup:
        """The initialised default process group's rank and size (one rank when none is)."""
        if not dist.is_available() or not dist.is_initialized():
            return cls.single()
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of `x` over ranks (in place; x itself for one rank)."""
        if self.world_size > 1:
            dist.all_reduce(x)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """[..., n] shards of every rank concatenated along the last dim: [..., n * world]."""
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=-1)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (pickled; the argument is ignored on other ranks)."""
        if self.world_size == 1:
            return obj
        box = [obj if self.is_first else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def fail(self, error: BaseException) -> str:
        """This rank failed with `error`: post it as the world's failure unless a rank did
        first, then leave the group. Returns the world's first failure, "rank R: Type:
        message" (this rank's own when there is no store)."""
        mine = f"rank {self.rank}: {type(error).__name__}: {error}"
        first = mine if self.store is None else self._post(mine)
        self.leave()
        return first

    def _post(self, failure: str) -> str:
        try:
            return self.store.compare_set(FAILURE_KEY, "", failure).decode()
        except RuntimeError:  # NOTE: the store is gone (its host process ended): our own
            return failure

    def leave(self) -> None:
        """Leave (destroy) the process group now; later calls do nothing."""
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
