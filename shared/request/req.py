"""A request as the scheduler sees it: prompt, outputs, prefix and KV bookkeeping (§2.1).

Interval picture of one request's `req_to_token` row (all lengths in tokens):

    [0, cache_protected_len)          owned by the radix tree (locked through last_node)
    [cache_protected_len, len(prefix_indices))   request-private prefix (earlier chunks'
                                                 unaligned tail when page_size > 1)
    [len(prefix_indices), len(fill_ids))         computed by this extend

Token ids: `origin_input_ids` and `output_ids` are lists of ints (the API); `fill_ids`, the
tokens of this round, is an [n] int64 array over `origin_input_array` (built once).
    kv_committed_len                  tokens whose KV is valid after the last forward
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Protocol

import numpy as np

from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams
from shared.request.validation import token_array


class PrefixMatcher(Protocol):
    """The one call `Req.init_next_round_input` makes on a prefix cache
    (`shared.memory.prefix_cache.PrefixCache` has it); the request knows no more of the cache.
    NOTE: it reads the match's `device_indices` and `last_node` (`MatchResult`)."""

    def match_prefix(self, key: Sequence[int]) -> Any: ...


@dataclass(eq=False)
class Req:
    """One generation request. Identity equality: two Req objects are never 'the same'."""

    rid: str
    origin_input_ids: list[int]
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    arrival_time: float = 0.0
    output_ids: list[int] = field(default_factory=list)
    fill_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [n] int64
    prefix_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    extend_input_len: int = 0
    extend_logprob_start_len: int = 0
    last_node: Any = None
    cache_protected_len: int = 0
    req_pool_idx: int | None = None
    kv_committed_len: int = 0
    kv_allocated_len: int = 0
    kv_freed: bool = False
    is_chunked: int = 0
    logprob_start_len: int = -1
    finished_reason: FinishReason | None = None
    to_finish: FinishReason | None = None
    is_retracted: bool = False
    retraction_count: int = 0
    cached_tokens: int = 0
    already_computed: int = 0
    _origin_array: np.ndarray | None = field(default=None, init=False, repr=False)
    prompt_array: InitVar[np.ndarray | None] = None

    def __post_init__(self, prompt_array: np.ndarray | None) -> None:
        """`prompt_array`, when given, is the prompt already as a read-only [P] int64 array
        and `origin_input_ids` its Python ints (a trusted source, e.g. a WorkloadRequest)."""
        if prompt_array is not None:
            self._origin_array, self.origin_input_ids = prompt_array, list(self.origin_input_ids)
        elif (arr := _int64_prompt(self.origin_input_ids)) is not None:
            # NOTE: the array is kept as origin_input_array (one conversion, not two)
            self._origin_array, self.origin_input_ids = arr, arr.tolist()
        else:  # NOTE: not all ints: kept as given, for validation to refuse (never int()-cast)
            self.origin_input_ids = list(self.origin_input_ids)
        # SGLang's handle_generate_request defaulting: no logprobs -> -1; logprobs asked
        # without a start -> start at the end of the prompt (output logprobs only).
        p = self.sampling_params
        if not p.return_logprob:
            self.logprob_start_len = -1
        elif p.logprob_start_len == -1:
            self.logprob_start_len = len(self.origin_input_ids)
        else:
            self.logprob_start_len = p.logprob_start_len

    def __repr__(self) -> str:
        return (f"Req(rid={self.rid!r}, prompt_len={len(self.origin_input_ids)}, "
                f"output_len={len(self.output_ids)}, prefix={len(self.prefix_indices)}, "
                f"extend={self.extend_input_len}, row={self.req_pool_idx})")

    @property
    def origin_input_array(self) -> np.ndarray:
        """[P] int64 read-only copy of the prompt, built on first use. A prompt numpy cannot
        hold as int64 gives an object array (validation rejects it)."""
        if self._origin_array is None:
            arr = _int64_prompt(self.origin_input_ids)
            if arr is None:
                arr = np.empty(len(self.origin_input_ids), dtype=object)
                arr[:] = self.origin_input_ids
                arr.flags.writeable = False
            self._origin_array = arr
        return self._origin_array

    def all_token_ids(self) -> np.ndarray:
        """[P + O] int64 prompt then outputs."""
        if not self.output_ids:
            return self.origin_input_array
        return np.concatenate((self.origin_input_array, _int64_array(self.output_ids)))

    def token_ids(self, start: int, stop: int) -> np.ndarray:
        """[stop - start] int64 all_token_ids()[start:stop] (0 <= start <= stop <= P + O),
        converting only the outputs in range."""
        p = len(self.origin_input_array)
        if start >= p:
            return _int64_array(self.output_ids[start - p : stop - p])
        if stop <= p:
            return self.origin_input_array[start:stop]
        return np.concatenate((self.origin_input_array[start:],
                               _int64_array(self.output_ids[: stop - p])))

    @property
    def return_logprob(self) -> bool:
        return self.sampling_params.return_logprob

    @property
    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def finished(self) -> bool:
        return self.finished_reason is not None

    def init_next_round_input(self, tree_cache: PrefixMatcher | None = None) -> None:
        """Set `fill_ids`, match the cached prefix (when a cache is given) and the extend length.

        NOTE: the prefix is capped at `len(fill_ids) - 1` so at least one token is computed
        (its hidden row is sampled from), and at `logprob_start_len` when logprobs are asked
        (rows from there on need hidden states). Without a cache (a chunked request
        continuing) `prefix_indices` stays what the stash left.
        """
        self.fill_ids = self.all_token_ids()
        max_prefix = len(self.fill_ids) - 1
        if self.return_logprob and self.logprob_start_len >= 0:
            max_prefix = min(max_prefix, self.logprob_start_len)
        max_prefix = max(max_prefix, 0)
        if tree_cache is not None:
            match = tree_cache.match_prefix(self.fill_ids[:max_prefix])
            self.prefix_indices = match.device_indices
            self.last_node = match.last_node
            self.cache_protected_len = len(match.device_indices)
        self.set_extend_input_len(len(self.fill_ids) - len(self.prefix_indices))

    def set_extend_input_len(self, n: int) -> None:
        """Set the extend length and the logprob start relative to this extend (in [0, n])."""
        self.extend_input_len = n
        pre = len(self.prefix_indices)
        if self.logprob_start_len == -1:
            start = len(self.fill_ids)
        else:
            start = max(self.logprob_start_len, pre)
        self.extend_logprob_start_len = min(start - pre, n)

    def reset_for_retract(self) -> None:
        """Back to the waiting queue: KV bookkeeping cleared, outputs kept (re-prefilled
        later over prompt + outputs, with whatever prefix the cache still holds)."""
        self.prefix_indices = np.zeros(0, np.int64)
        self.last_node = None
        self.extend_input_len = 0
        self.cache_protected_len = 0
        self.kv_committed_len = self.kv_allocated_len = 0
        self.kv_freed = False
        self.is_chunked = 0
        self.is_retracted = True
        self.retraction_count += 1

    def pop_committed_kv_cache(self) -> int:
        """The committed KV length, once: releasing a request's KV twice is a bug."""
        if self.kv_freed:
            raise RuntimeError(f"request {self.rid!r}: KV cache released twice")
        self.kv_freed = True
        return self.kv_committed_len


def _int64_array(ids: list[int]) -> np.ndarray:
    """[n] int64 from a list of ints (sampled ids). NOTE: fromiter converts a list of
    Python ints about twice as fast as np.array."""
    return np.fromiter(ids, np.int64, len(ids))


def _int64_prompt(ids: Any) -> np.ndarray | None:
    """A read-only [P] int64 copy of a prompt of ints (numpy's or Python's, never bools or
    floats), or None for anything else (left to validation, which names the bad token)."""
    try:
        arr = token_array(ids)
    except InvalidRequestError:
        return None
    arr = arr.astype(np.int64, copy=False)
    arr.flags.writeable = False
    return arr
