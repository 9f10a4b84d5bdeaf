"""batchtwin's specification: SGLang's request -> ForwardBatch -> ModelRunner path, written once.

Pure Python and numpy: no torch, no simpy, no clock, no global state. Both executors
(`exec/`, `sim/`) run exactly this code.

Each public name is imported from its module (`EXPORTS`) when first read (PEP 562), so
importing one part of the spec (a request, a workload generator) loads only that part.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from shared.lazy_exports import export, exported_names

EXPORTS = MappingProxyType({   # public name -> the module that defines it
    "GENERATORS": "shared.workload.registry",
    "SLO": "shared.trace.run_result",
    "TOP_K_ALL": "shared.request.sampling_params",
    "AddReqResult": "shared.admission.prefill_adder",
    "AllocatorState": "shared.memory.token_allocator",
    "ChunkCache": "shared.memory.chunk_cache",
    "Empirical": "shared.workload.length_dist",
    "EngineConfig": "shared.config.engine_config",
    "FieldDiff": "shared.trace.step_record",
    "FinishReason": "shared.request.finish_reason",
    "Fixed": "shared.workload.length_dist",
    "FollowUp": "shared.workload.workload",
    "ForwardBatch": "shared.batch.forward_batch",
    "ForwardMode": "shared.batch.forward_mode",
    "InvalidRequestError": "shared.request.invalid_request",
    "KVCacheOOMError": "shared.memory.kv_memory",
    "KVMemory": "shared.memory.kv_memory",
    "LengthDist": "shared.workload.length_dist",
    "LogNormal": "shared.workload.length_dist",
    "LogitRows": "shared.batch.logit_rows",
    "MatchResult": "shared.memory.prefix_cache",
    "MemoryLeakError": "shared.memory.kv_memory",
    "ModelInfo": "shared.config.engine_config",
    "ModelRunner": "shared.loop.model_runner",
    "MultiTenant": "shared.workload.multi_tenant",
    "MultiTurn": "shared.workload.multi_turn",
    "NewTokenRatio": "shared.loop.new_token_ratio",
    "PaddedDecode": "shared.batch.cuda_graph",
    "Positions": "shared.batch.positions",
    "PrefillAdder": "shared.admission.prefill_adder",
    "PrefixCache": "shared.memory.prefix_cache",
    "RadixCache": "shared.memory.radix_cache",
    "Req": "shared.request.req",
    "ReqToTokenPool": "shared.memory.req_to_token_pool",
    "RequestRecord": "shared.trace.trace",
    "RunResult": "shared.trace.run_result",
    "RunnerOutput": "shared.loop.model_runner",
    "SamplingParams": "shared.request.sampling_params",
    "ScheduleBatch": "shared.batch.schedule_batch",
    "SchedulePolicy": "shared.admission.schedule_policy",
    "Scheduler": "shared.loop.scheduler",
    "Sessions": "shared.workload.sessions",
    "ShareGPTLike": "shared.workload.sharegpt",
    "SharedPrefix": "shared.workload.shared_prefix",
    "StepRecord": "shared.trace.step_record",
    "Synthetic": "shared.workload.synthetic",
    "TokenToKVPoolAllocator": "shared.memory.token_allocator",
    "Trace": "shared.trace.trace",
    "TraceHeader": "shared.trace.trace",
    "TreeNode": "shared.memory.tree_node",
    "Uniform": "shared.workload.length_dist",
    "Workload": "shared.workload.workload",
    "WorkloadRequest": "shared.workload.workload",
    "arrival_times": "shared.workload.arrivals",
    "as_length_dist": "shared.workload.length_dist",
    "can_run_graph": "shared.batch.cuda_graph",
    "compute_positions": "shared.batch.positions",
    "cuda_graph_batch_sizes": "shared.batch.cuda_graph",
    "pad_decode_batch": "shared.batch.cuda_graph",
    "padded_batch_size": "shared.batch.cuda_graph",
    "select_logit_rows": "shared.batch.logit_rows",
    "validate_request": "shared.request.validation",
})

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The public `name`, imported from its module (`EXPORTS`)."""
    return export(__name__, EXPORTS, name)


def __dir__() -> list[str]:
    return exported_names(globals(), EXPORTS)
