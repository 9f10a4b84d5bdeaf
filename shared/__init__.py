"""batchtwin's specification: SGLang's request -> ForwardBatch -> ModelRunner path, written once.

Pure Python and numpy: no torch, no simpy, no clock, no global state. Both executors
(`exec/`, `sim/`) run exactly this code.
"""

from shared.admission.prefill_adder import AddReqResult, PrefillAdder
from shared.admission.schedule_policy import SchedulePolicy
from shared.batch.cuda_graph import (
    PaddedDecode,
    can_run_graph,
    cuda_graph_batch_sizes,
    pad_decode_batch,
    padded_batch_size,
)
from shared.batch.forward_batch import ForwardBatch
from shared.batch.forward_mode import ForwardMode
from shared.batch.logit_rows import LogitRows, select_logit_rows
from shared.batch.positions import Positions, compute_positions
from shared.batch.schedule_batch import ScheduleBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.model_runner import ModelRunner, RunnerOutput
from shared.loop.new_token_ratio import NewTokenRatio
from shared.loop.scheduler import Scheduler
from shared.memory.chunk_cache import ChunkCache
from shared.memory.kv_memory import KVCacheOOMError, KVMemory, MemoryLeakError
from shared.memory.prefix_cache import MatchResult, PrefixCache
from shared.memory.radix_cache import RadixCache
from shared.memory.req_to_token_pool import ReqToTokenPool
from shared.memory.token_allocator import AllocatorState, TokenToKVPoolAllocator
from shared.memory.tree_node import TreeNode
from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req
from shared.request.sampling_params import TOP_K_ALL, SamplingParams
from shared.request.validation import validate_request
from shared.trace.run_result import SLO, RunResult
from shared.trace.step_record import FieldDiff, StepRecord
from shared.trace.trace import RequestRecord, Trace, TraceHeader
from shared.workload.arrivals import arrival_times
from shared.workload.length_dist import (
    Empirical,
    Fixed,
    LengthDist,
    LogNormal,
    Uniform,
    as_length_dist,
)
from shared.workload.multi_tenant import MultiTenant
from shared.workload.multi_turn import MultiTurn
from shared.workload.registry import GENERATORS
from shared.workload.sessions import Sessions
from shared.workload.shared_prefix import SharedPrefix
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.synthetic import Synthetic
from shared.workload.workload import FollowUp, Workload, WorkloadRequest

__all__ = [
    "GENERATORS",
    "SLO",
    "TOP_K_ALL",
    "AddReqResult",
    "AllocatorState",
    "ChunkCache",
    "Empirical",
    "EngineConfig",
    "FieldDiff",
    "FinishReason",
    "Fixed",
    "FollowUp",
    "ForwardBatch",
    "ForwardMode",
    "InvalidRequestError",
    "KVCacheOOMError",
    "KVMemory",
    "LengthDist",
    "LogNormal",
    "LogitRows",
    "MatchResult",
    "MemoryLeakError",
    "ModelInfo",
    "ModelRunner",
    "MultiTenant",
    "MultiTurn",
    "NewTokenRatio",
    "PaddedDecode",
    "Positions",
    "PrefillAdder",
    "PrefixCache",
    "RadixCache",
    "Req",
    "ReqToTokenPool",
    "RequestRecord",
    "RunResult",
    "RunnerOutput",
    "SamplingParams",
    "ScheduleBatch",
    "SchedulePolicy",
    "Scheduler",
    "Sessions",
    "ShareGPTLike",
    "SharedPrefix",
    "StepRecord",
    "Synthetic",
    "TokenToKVPoolAllocator",
    "Trace",
    "TraceHeader",
    "TreeNode",
    "Uniform",
    "Workload",
    "WorkloadRequest",
    "arrival_times",
    "as_length_dist",
    "can_run_graph",
    "compute_positions",
    "cuda_graph_batch_sizes",
    "pad_decode_batch",
    "padded_batch_size",
    "select_logit_rows",
    "validate_request",
]
