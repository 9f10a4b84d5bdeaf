"""Running the Engine over `--tp N` ranks (SGLang's layout): rank 0 builds the Engine and its
scheduler and runs the job's `main(engine, *main_args)`; every other rank loads its shard
and follows rank 0's forwards until the stop message.

    launch(2, TPJob(folder, main=print_outputs, main_args=(prompts,), engine_args={...}))

`launch` checks the model against tp_size first (`check_tp_model`: ValueError naming
tp_size, before anything is loaded or started), then joins torchrun's world when torchrun
started this process, or spawns the ranks (`exec.distributed.tp_launch.spawn`). `main` and its
arguments travel to the rank processes, so they must pickle (a module-level function).

A forward that raises on any rank is fatal to the world (`exec.runner.tp_model_runner`): rank 0's
engine raises `FatalRunnerError` naming the rank that failed first (the online engine ends
every open request with it), the followers stop, and `launch` raises `TPStartError` naming
that rank.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from exec.device.torch_device import checked_device
from exec.distributed.tp_group import TPGroup
from exec.distributed.tp_launch import FAIL_GRACE_S, init_torchrun, spawn, torchrun_world
from exec.engine.engine import Engine
from exec.loading.model_files import check_tp_model, open_model
from exec.runner.tp_model_runner import STOP, TPModelRunner


@dataclass(frozen=True)
class TPJob:
    model: str | Path | None                 # a checkpoint folder or .gguf (None: the default)
    main: Callable[..., Any]                 # main(engine, *main_args), on rank 0
    main_args: tuple[Any, ...] = ()
    engine_args: dict[str, Any] = field(default_factory=dict)  # Engine's keywords
    threads: int | None = None               # torch threads per rank (None: cores / ranks)
    dist_timeout_s: float | None = None      # each collective's (None: torch's default)
    fail_grace_s: float = FAIL_GRACE_S       # the other ranks' time to end once one failed
    # on_runner(runner) on every rank before its first forward (tests inject faults with it)
    on_runner: Callable[[TPModelRunner], Any] | None = None


def launch(tp_size: int, job: TPJob) -> None:
    """Run `job` on `tp_size` ranks; returns when every rank has exited."""
    check_tp_model(job.model, tp_size)
    device = job.engine_args.get("device", "cpu")
    checked_device(device)
    if not torchrun_world():
        spawn(tp_size, run_rank, job, device=device, timeout_s=job.dist_timeout_s,
              fail_grace_s=job.fail_grace_s)
        return
    if int(os.environ["WORLD_SIZE"]) != tp_size:
        raise ValueError(f"tp_size (--tp) {tp_size}, but torchrun started "
                         f"{os.environ['WORLD_SIZE']} ranks (--nproc-per-node)")
    group = init_torchrun(device, job.dist_timeout_s)
    try:
        run_rank(group, job)
    finally:
        group.leave()


def run_rank(group: TPGroup, job: TPJob) -> None:
    """One rank's part: lead (rank 0) or follow."""
    torch.set_num_threads(job.threads or max(1, torch.get_num_threads() // group.world_size))
    job = dataclasses.replace(job, engine_args={**job.engine_args, "device": _rank_device(job, group)})
    if group.is_first:
        lead(group, job)
    else:
        follow(group, job)


def lead(group: TPGroup, job: TPJob) -> None:
    """Rank 0: the Engine (scheduler, sampling) and the job; the followers stop after it."""
    engine = Engine(job.model, tp_group=group, **job.engine_args)
    try:
        if job.on_runner is not None:
            job.on_runner(engine.runner)
        job.main(engine, *job.main_args)
    finally:
        if isinstance(engine.runner, TPModelRunner):  # NOTE: a torchrun world of one has none
            engine.runner.close()


def follow(group: TPGroup, job: TPJob) -> None:
    """A follower rank: load and shard the model, then run each broadcast ForwardBatch."""
    check_tp_model(job.model, group.world_size)
    args = job.engine_args
    model = open_model(job.model, device=args["device"], dtype=args.get("dtype", "float32")).model
    runner = TPModelRunner.follower(model, group)
    if job.on_runner is not None:
        job.on_runner(runner)
    while (fb := group.broadcast(None)) is not STOP:
        runner.forward(fb)


def _rank_device(job: TPJob, group: TPGroup) -> str:
    """CUDA: one device per rank (torchrun's LOCAL_RANK, else the rank); others unchanged."""
    device = torch.device(job.engine_args.get("device", "cpu"))
    if device.type != "cuda" or device.index is not None:
        return str(device)
    local = int(os.environ.get("LOCAL_RANK", group.rank))
    torch.cuda.set_device(local)
    return f"cuda:{local}"
