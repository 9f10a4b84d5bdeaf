"""Starting a tensor-parallel world (`--tp N`) the way users start SGLang: one process per
rank, on `torch.distributed` (gloo on CPU, NCCL on CUDA).

- `spawn(world_size, target, *args)`: from one process, start `world_size` ranks with
  `torch.multiprocessing` and run `target(group, *args)` in each (rank 0 serves, the others
  follow it); an error in any rank is raised here as `TPStartError` naming the rank that
  failed first. Ranks leave the group followers first, and a rank that finished cleanly
  exits without running C++ static destructors (gloo could abort a finished rank there,
  failing a good run).
- `init_torchrun(device)`: under `torchrun --nproc-per-node N`, join the world torchrun made
  (its RANK / WORLD_SIZE / MASTER_ADDR); read at the command line's entry point only.

A failure is fatal to a spawned world, as in SGLang: the failing rank posts it in the
rendezvous store (`TPGroup.fail`; this process hosts the store), each follower's watchdog
then ends its process (maybe blocked in a collective the failed rank never joins), which
ends rank 0's collectives too; rank 0 ends on its own (its engine ends its requests with
the error) or, `fail_grace_s` (FAIL_GRACE_S) after a rank ended failing, is terminated. Under torchrun the
ranks share no failure store: each reports its own error, and the followers end when
rank 0's process does.

`timeout_s` (SGLang's `--dist-timeout`; None: torch's default, 30 min for gloo) bounds each
collective: the backstop for a rank that hangs rather than fails.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from exec.distributed.tp_group import FAILURE_KEY, TPGroup

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LEAVE_TIMEOUT_S = 30.0   # how long rank 0 waits for each follower to leave the group
FAIL_GRACE_S = 10.0      # how long the other ranks get to end once one failed
WATCH_FOREVER = timedelta(days=365)  # a follower's watchdog waits this long for a failure


class TPStartError(RuntimeError):
    """A tensor-parallel world could not start, or one of its ranks failed."""


def backend_for(device: str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def spawn(world_size: int, target: Callable[..., Any], *args: Any, device: str = "cpu",
          timeout_s: float | None = None, fail_grace_s: float = FAIL_GRACE_S) -> None:
    """Run `target(group, *args)` on `world_size` new rank processes; wait for all (once one
    ended failing, the others for at most `fail_grace_s` more)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"tp size must be a positive integer, got {world_size!r}")
    # NOTE: the rendezvous store lives here (on a port it picks), not in a rank: no rank's
    # end closes it, so the world's first failure stays readable to the others and to us
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, **_timeout(timeout_s))
    left = mp.get_context("spawn").Semaphore(0)
    try:
        ranks = mp.spawn(_rank_main, args=(world_size, store.port, device, timeout_s, target, args,
                                           left), nprocs=world_size, join=False)
        while not ranks.join(grace_period=fail_grace_s):
            pass
    except mp.ProcessRaisedException as e:
        raise TPStartError(f"a tensor-parallel rank failed: "
                           f"{_posted_failure(store) or _last_line(str(e))}") from None
    except mp.ProcessExitedException as e:
        posted = _posted_failure(store)
        if posted:
            raise TPStartError(f"a tensor-parallel rank failed: {posted}") from None
        raise TPStartError(f"a tensor-parallel rank exited: {e}") from None


def _rank_main(rank: int, world_size: int, port: int, device: str, timeout_s: float | None,
               target: Callable[..., Any], args: tuple[Any, ...], left) -> None:
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, **_timeout(timeout_s))
    dist.init_process_group(backend_for(device), store=store, rank=rank, world_size=world_size,
                            **_timeout(timeout_s))
    group = TPGroup(rank, world_size, store)
    if not group.is_first:
        _watch_failures(port, left)
    try:
        target(group, *args)
    except BaseException as e:
        group.fail(e)  # NOTE: posted, unless a rank failed first: spawn reports that one
        raise
    finally:
        _leave(group, left)
    _exit_now()


def _timeout(timeout_s: float | None) -> dict[str, timedelta]:
    return {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}


def _watch_failures(port: int, left) -> None:
    """A follower's watchdog thread: once any rank posted a failure (`TPGroup.fail`), end
    this process, wherever its main thread is.
    NOTE: a rank that failed cannot reliably end a peer's collective by leaving the group
    (gloo closes its connections only once nothing holds the group), and rank 0 stays up
    after its own failure, to end its requests; the followers' exit ends rank 0's."""
    def watch() -> None:
        store = dist.TCPStore("127.0.0.1", port, is_master=False)  # NOTE: a connection of its own
        try:
            store.wait([FAILURE_KEY], WATCH_FOREVER)
        except RuntimeError:  # NOTE: the store is gone: spawn's process ended
            return
        left.release()
        _exit_now(1)

    threading.Thread(target=watch, name="tp-failure-watchdog", daemon=True).start()


def _leave(group: TPGroup, left) -> None:
    """Tear the process group down, rank 0 last.
    NOTE: a follower still tearing down when rank 0 ends can die with SIGABRT in gloo, so
    rank 0 waits (at most LEAVE_TIMEOUT_S each) for the followers to have left."""
    if not group.is_first:
        group.leave()
        left.release()
        return
    for _ in range(group.world_size - 1):
        left.acquire(timeout=LEAVE_TIMEOUT_S)
    group.leave()


def _exit_now(code: int = 0) -> None:
    """End a rank process without running C++ static destructors (code 0: it finished cleanly).
    NOTE: gloo can abort (SIGABRT, 'terminate called without an active exception') while
    the interpreter shuts down after the group is destroyed; the rank's work is done and
    its files closed by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _posted_failure(store: dist.Store) -> str | None:
    """The world's first failure (`TPGroup.fail`), None when no rank posted one."""
    return store.get(FAILURE_KEY).decode() if store.check([FAILURE_KEY]) else None


def torchrun_world() -> bool:
    """Whether this process was started by torchrun (its variables are all set)."""
    return all(v in os.environ for v in TORCHRUN_VARS)


def init_torchrun(device: str, timeout_s: float | None = None) -> TPGroup:
    """Join torchrun's world; TPStartError when it cannot be joined."""
    try:
        dist.init_process_group(backend_for(device), init_method="env://", **_timeout(timeout_s))
    except (RuntimeError, ValueError) as e:
        raise TPStartError(f"cannot join the torchrun world: {e}") from None
    return TPGroup.current()


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text
