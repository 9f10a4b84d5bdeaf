"""`TPModelRunner`: the spec's `ModelRunner` on one rank of a tensor-parallel group.

Every rank holds a shard of the model (`exec.models.tp_shard`) and a KV pool of its own KV
heads; each forward runs on all ranks at once, their collectives meeting inside the model.
Rank 0 (the Engine's, under the scheduler) broadcasts each ForwardBatch before its own
forward; the others receive it in `exec.engine.tp_worker.follow`. Logits are all-gathered over the
vocabulary; only rank 0 samples. `close()` on rank 0 sends the stop message.

A forward that raises on any rank is fatal to the group (as in SGLang): the other ranks may
be blocked inside its collectives, so no rank runs another. The rank posts its error
(`TPGroup.fail`; `exec.distributed.tp_launch` then ends the followers, which breaks rank 0's
collectives) and raises `FatalRunnerError` naming the rank that failed first; every later
forward raises it again, and `close()` sends nothing.

At construction rank 0 broadcasts a `RunnerSetup` (its resolved EngineConfig and runner
options), so every rank builds the same pool, whatever its own free memory.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from exec.device.torch_dtype import torch_dtype
from exec.distributed.tp_group import TPGroup
from exec.memory.kv_cache_dtype import dtype_bytes
from exec.memory.kv_pool import KVPool
from exec.models import CausalLM
from exec.models.tp_shard import shard_model
from exec.runner.failing_steps import FatalRunnerError
from exec.runner.model_runner import TorchModelRunner
from shared.batch.forward_batch import ForwardBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.config.kv_cache_layout import KVCacheLayout
from shared.loop.model_runner import RunnerOutput

STOP = None  # the broadcast that ends the followers' loop


@dataclass(frozen=True)
class RunnerSetup:
    engine_config: EngineConfig
    model_info: ModelInfo
    options: dict[str, Any]  # TorchModelRunner's keyword arguments (device, dtype, ...)


class TPModelRunner(TorchModelRunner):
    def __init__(self, model: CausalLM, engine_config: EngineConfig, model_info: ModelInfo,
                 *, group: TPGroup, **options: Any) -> None:
        if options.get("torch_compile"):
            raise ValueError(f"torch_compile runs with tp_size 1 only (tp_size {group.world_size})")
        # NOTE: a captured CUDA graph would replay rank 0's collectives without the others.
        engine_config = dataclasses.replace(engine_config, disable_cuda_graph=True)
        if group.is_first:
            group.broadcast(RunnerSetup(engine_config, model_info, options))
        self.group, self._closed = group, False
        self.failure: str | None = None  # the group's first failure, once a forward failed
        shard_model(model, group)
        device, dtype = torch.device(options.get("device", "cpu")), torch_dtype(options.get("dtype", "float32"))
        # NOTE: no oneDNN packing: PackedLinear would drop RowParallelLinear's all-reduce.
        model.prepare_for_inference(column_major=device.type == "cpu" and dtype == torch.float32,
                                    pack=False)
        super().__init__(model, engine_config, model_info, **options)

    @classmethod
    def follower(cls, model: CausalLM, group: TPGroup) -> TPModelRunner:
        """A follower rank's runner, built from the setup rank 0 broadcasts."""
        setup: RunnerSetup = group.broadcast(None)
        return cls(model, setup.engine_config, setup.model_info, group=group, **setup.options)

    def new_kv_pool(self, config, kv_dtype: torch.dtype) -> KVPool:
        """This rank's KV heads only (`KVCacheLayout.of(..., tp_size)`)."""
        layout = KVCacheLayout.of(config, dtype_bytes(kv_dtype), self.group.world_size)
        return KVPool(layout.num_layers, self.config.max_total_tokens, self.config.page_size,
                      layout.num_vectors // 2, layout.vector_dim, kv_dtype, self.device)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [R, H] -> full float32 logits [R, V], gathered from every rank's [R, V/world]."""
        return self.group.all_gather_last(self.model.compute_logits(hidden))

    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        """`fb`'s forward on every rank (rank 0 broadcasts it first); FatalRunnerError when
        it raised on any rank, or any forward did before."""
        if self.failure is not None:
            raise FatalRunnerError(self.failure)
        try:
            if self.group.is_first:
                self.group.broadcast(compact(fb))
            return super().forward(fb)
        except Exception as e:
            # NOTE: no retry: a peer is maybe blocked in a collective of this forward that
            # this rank never joins (the posted failure ends the followers' processes)
            self.failure = f"the tensor-parallel group failed: {self.group.fail(e)}"
            raise FatalRunnerError(self.failure) from e

    def close(self) -> None:
        """On rank 0: tell the followers to stop (once; later calls, or after a failed
        forward, do nothing)."""
        if self.group.is_first and not self._closed and self.failure is None:
            self._closed = True
            self.group.broadcast(STOP)


def compact(fb: ForwardBatch) -> ForwardBatch:
    """`fb` with only its requests' req_to_token rows, up to the longest sequence: what a
    follower's forward reads, without pickling the whole table [rows, context] each step."""
    s_max = int(fb.seq_lens.max()) if fb.batch_size else 0
    table = np.ascontiguousarray(fb.req_to_token[np.asarray(fb.req_pool_indices)][:, :s_max])
    return dataclasses.replace(fb, req_to_token=table,
                               req_pool_indices=np.arange(fb.batch_size, dtype=np.int64))


def runner_class(group: TPGroup | None):
    """The Engine's runner class: TorchModelRunner for one rank, else rank 0's TPModelRunner."""
    if group is None or group.world_size == 1:
        return TorchModelRunner
    if not dist.is_initialized():
        raise RuntimeError(f"a tp_group of {group.world_size} ranks needs their torch.distributed "
                           f"world: start them with exec.engine.tp_worker.launch (or torchrun)")
    return functools.partial(TPModelRunner, group=group)
