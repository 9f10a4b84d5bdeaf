"""Starting a tensor-parallel world (`--tp N`) the way users start SGLang: one process per
rank, on `torch.distributed` (gloo on CPU, NCCL on CUDA).

- `spawn(world_size, target, *args)`: from one process, start `world_size` ranks with
  `torch.multiprocessing` and run `target(group, *args)` in each (rank 0 serves, the others
  follow it); an error in any rank is raised here as `TPStartError` naming the rank. Ranks
  leave the group followers first, and a rank that finished cleanly exits without running
  C++ static destructors (gloo could abort a finished rank there, failing a good run).
- `init_torchrun(device)`: under `torchrun --nproc-per-node N`, join the world torchrun made
  (its RANK / WORLD_SIZE / MASTER_ADDR); read at the command line's entry point only.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from exec.tp_group import TPGroup

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LEAVE_TIMEOUT_S = 30.0   # how long rank 0 waits for each follower to leave the group


class TPStartError(RuntimeError):
    """A tensor-parallel world could not start, or one of its ranks failed."""


def backend_for(device: str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(world_size: int, target: Callable[..., Any], *args: Any, device: str = "cpu") -> None:
    """Run `target(group, *args)` on `world_size` new rank processes; wait for all."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"tp size must be a positive integer, got {world_size!r}")
    ctx = mp.get_context("spawn")
    port, errors, left = free_port(), ctx.SimpleQueue(), ctx.Semaphore(0)
    try:
        mp.spawn(_rank_main, args=(world_size, port, device, target, args, errors, left),
                 nprocs=world_size, join=True)
    except mp.ProcessRaisedException as e:
        raise TPStartError(f"a tensor-parallel rank failed: "
                           f"{_first_error(errors) or _last_line(str(e))}") from None
    except mp.ProcessExitedException as e:
        reported = _first_error(errors)
        if reported:
            raise TPStartError(f"a tensor-parallel rank failed: {reported}") from None
        raise TPStartError(f"a tensor-parallel rank exited: {e}") from None


def _rank_main(rank: int, world_size: int, port: int, device: str,
               target: Callable[..., Any], args: tuple[Any, ...], errors, left) -> None:
    dist.init_process_group(backend_for(device), init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size)
    try:
        target(TPGroup(rank, world_size), *args)
    except BaseException as e:
        # NOTE: recorded before the group is torn down, so spawn reports it even when another
        # process ends first.
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise
    finally:
        _leave(rank, world_size, left)
    _exit_now()


def _leave(rank: int, world_size: int, left) -> None:
    """Tear the process group down, rank 0 last.
    NOTE: rank 0 hosts the rendezvous store; a follower still tearing down when it closes
    dies with SIGABRT in gloo, so rank 0 waits (at most LEAVE_TIMEOUT_S each) for the
    followers to have left."""
    if rank != 0:
        dist.destroy_process_group()
        left.release()
        return
    for _ in range(world_size - 1):
        left.acquire(timeout=LEAVE_TIMEOUT_S)
    dist.destroy_process_group()


def _exit_now() -> None:
    """End a rank process that finished cleanly without running C++ static destructors.
    NOTE: gloo can abort (SIGABRT, 'terminate called without an active exception') while
    the interpreter shuts down after the group is destroyed; the rank's work is done and
    its files closed by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _first_error(errors) -> str | None:
    """The first exception a rank recorded (its type and message), None when none did."""
    return None if errors.empty() else errors.get()


def torchrun_world() -> bool:
    """Whether this process was started by torchrun (its variables are all set)."""
    return all(v in os.environ for v in TORCHRUN_VARS)


def init_torchrun(device: str) -> TPGroup:
    """Join torchrun's world; TPStartError when it cannot be joined."""
    try:
        dist.init_process_group(backend_for(device), init_method="env://")
    except (RuntimeError, ValueError) as e:
        raise TPStartError(f"cannot join the torchrun world: {e}") from None
    return TPGroup.current()


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text
