"""batchtwin's specification: SGLang's request -> ForwardBatch -> ModelRunner path, written once.

Pure Python and numpy: no torch, no simpy, no clock, no global state. Both executors
(`exec/`, `sim/`) run exactly this code.
"""

from shared.chunk_cache import ChunkCache
from shared.finish_reason import FinishReason
from shared.invalid_request import InvalidRequestError
from shared.prefix_cache import MatchResult, PrefixCache
from shared.radix_cache import RadixCache, TreeNode
from shared.req import Req
from shared.req_to_token_pool import ReqToTokenPool
from shared.sampling_params import TOP_K_ALL, SamplingParams
from shared.token_allocator import AllocatorState, TokenToKVPoolAllocator
from shared.validation import validate_request

__all__ = [
    "TOP_K_ALL",
    "AllocatorState",
    "ChunkCache",
    "FinishReason",
    "InvalidRequestError",
    "MatchResult",
    "PrefixCache",
    "RadixCache",
    "Req",
    "ReqToTokenPool",
    "SamplingParams",
    "TokenToKVPoolAllocator",
    "TreeNode",
    "validate_request",
]
