"""batchtwin's specification: SGLang's request -> ForwardBatch -> ModelRunner path, written once.

Pure Python and numpy: no torch, no simpy, no clock, no global state. Both executors
(`exec/`, `sim/`) run exactly this code.
"""

from shared.chunk_cache import ChunkCache
from shared.cuda_graph import (
    PaddedDecode,
    can_run_graph,
    cuda_graph_batch_sizes,
    pad_decode_batch,
    padded_batch_size,
)
from shared.engine_config import EngineConfig, ModelInfo
from shared.finish_reason import FinishReason
from shared.forward_batch import ForwardBatch
from shared.forward_mode import ForwardMode
from shared.invalid_request import InvalidRequestError
from shared.kv_memory import KVCacheOOMError, KVMemory, MemoryLeakError
from shared.length_dist import Empirical, Fixed, LengthDist, LogNormal, Uniform, as_length_dist
from shared.logit_rows import LogitRows, select_logit_rows
from shared.model_runner import ModelRunner, RunnerOutput
from shared.new_token_ratio import NewTokenRatio
from shared.positions import Positions, compute_positions
from shared.prefill_adder import AddReqResult, PrefillAdder
from shared.prefix_cache import MatchResult, PrefixCache
from shared.radix_cache import RadixCache
from shared.req import Req
from shared.req_to_token_pool import ReqToTokenPool
from shared.run_result import SLO, RunResult
from shared.sampling_params import TOP_K_ALL, SamplingParams
from shared.schedule_batch import ScheduleBatch
from shared.schedule_policy import SchedulePolicy
from shared.scheduler import Scheduler
from shared.step_record import FieldDiff, StepRecord
from shared.token_allocator import AllocatorState, TokenToKVPoolAllocator
from shared.trace import RequestRecord, Trace
from shared.tree_node import TreeNode
from shared.validation import validate_request
from shared.workload import Workload, WorkloadRequest, arrival_times

__all__ = [
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
    "StepRecord",
    "TokenToKVPoolAllocator",
    "Trace",
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
