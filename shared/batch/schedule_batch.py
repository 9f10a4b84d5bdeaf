"""`ScheduleBatch`: the requests of one forward and the arrays built for it (semantics §6).

Per-request arrays (`req_pool_indices`, `seq_lens`, `output_ids`, `max_new_tokens`,
`ignore_eos`) follow `reqs` through filter and merge. `seq_lens` counts every token whose
KV is in the cache after this forward, this forward's tokens included. `output_ids` is the
last sampled token of each request (the next decode's input). Output counts come from the
requests' output lists (`output_lens`), never from seq_lens minus the prompt, which a
prompt still being chunked (or an overlap step not yet processed) makes wrong.
"""

from __future__ import annotations

import itertools
import operator
from typing import NamedTuple

import numpy as np

from shared.batch.forward_mode import ForwardMode
from shared.batch.positions import Positions, compute_positions
from shared.memory.kv_memory import KVMemory
from shared.request.finish_reason import FinishReason
from shared.request.req import Req

PER_REQ_ARRAYS = ("req_pool_indices", "seq_lens", "output_ids", "max_new_tokens", "ignore_eos")
DEFAULT_SAMPLING_SEED = 42
RETRACT_OOM_MESSAGE = ("Out of memory even after retracting all other requests in the decode "
                       "batch. Aborting the last request.")

RETRACT_DECODE_STEPS = 20   # decode steps a retraction frees room for (SGLang's retract_decode_steps)


class PerRequestInfo(NamedTuple):
    """Per-request values a runner needs, rebuilt only when the batch's requests change."""

    rids: tuple[str, ...]
    sampling_params: tuple
    sampling_seeds: np.ndarray          # [B] int64
    output_ids: tuple[list[int], ...]   # live references to each request's outputs
    top_logprobs_nums: tuple[int, ...]
    return_logprob: bool
    has_stop_ids: np.ndarray            # [B] bool: request has its own stop_token_ids


class RetractResult(NamedTuple):
    retracted: list[Req]   # back to the waiting queue, outputs kept
    aborted: list[Req]     # a lone request that still could not fit


def _i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _columns(rows: list[tuple[int, ...]], n: int) -> np.ndarray:
    """[n, B] int64 (each row C-contiguous) from B tuples of n ints."""
    return np.array(rows, dtype=np.int64).reshape(-1, n).T.copy()


class ScheduleBatch:
    def __init__(self, reqs: list[Req], mem: KVMemory, vocab_size: int,
                 chunked_req: Req | None = None) -> None:
        self.reqs = reqs
        self.mem = mem
        self.vocab_size = vocab_size
        self.chunked_req = chunked_req
        self.forward_mode = ForwardMode.IDLE
        self.decoding_reqs: list[Req] = []
        # NOTE: one conversion for the four int columns (a prefill batch is often one request)
        self.req_pool_indices, self.seq_lens, self.output_ids, self.max_new_tokens = _columns(
            [(r.req_pool_idx if r.req_pool_idx is not None else -1, r.kv_committed_len,
              r.output_ids[-1] if r.output_ids else 0, r.sampling_params.max_new_tokens)
             for r in reqs], 4)
        self.ignore_eos = np.array([r.sampling_params.ignore_eos for r in reqs], dtype=bool)
        self._clear_forward()

    def _clear_forward(self) -> None:
        self.input_ids = np.zeros(0, np.int64)
        self.out_cache_loc = np.zeros(0, np.int64)
        self.prefix_lens = self.extend_lens = self.extend_logprob_start_lens = np.zeros(0, np.int64)
        self.extend_input_logprob_token_ids: np.ndarray | None = None
        self._positions: Positions | None = None
        self._info: PerRequestInfo | None = None

    def __len__(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    @property
    def batch_size(self) -> int:
        return len(self.reqs)

    @property
    def extend_num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def return_logprob(self) -> bool:
        return self.per_request_info().return_logprob

    @property
    def rids(self) -> tuple[str, ...]:
        return self.per_request_info().rids

    def output_lens(self) -> np.ndarray:
        """[B] int64 len(output_ids) of each request now."""
        return np.fromiter(map(len, self.per_request_info().output_ids), np.int64, len(self.reqs))

    def copy_for_result(self) -> ScheduleBatch:
        """What the result processing of this forward reads, kept while the live batch is
        filtered, merged and prepared for the next one (SGLang's ScheduleBatch.copy under
        the overlap schedule). NOTE: batch arrays are replaced, never written in place, so a
        shallow copy with its own request lists suffices."""
        snap = ScheduleBatch.__new__(ScheduleBatch)
        snap.__dict__.update(self.__dict__)  # NOTE: copy.copy costs ~5x more here
        snap.reqs, snap.decoding_reqs = list(self.reqs), list(self.decoding_reqs)
        return snap

    def per_request_info(self) -> PerRequestInfo:
        if self._info is None:
            self._info = _build_info(self.reqs)
        return self._info

    def positions(self) -> Positions:
        """Positions of this forward's tokens (cached until the batch changes)."""
        if self._positions is None:
            if self.forward_mode.is_decode():
                self._positions = Positions(self.seq_lens - 1, np.arange(len(self.reqs)))
            else:
                self._positions = compute_positions(self.prefix_lens, self.extend_lens)
        return self._positions

    def prepare_for_extend(self) -> None:
        """Allocate rows and slots for each request's tokens [prefix, len(fill_ids))."""
        self.forward_mode = ForwardMode.EXTEND
        reqs = self.reqs
        pre, seq, self.extend_logprob_start_lens = _columns(
            [(len(r.prefix_indices), len(r.fill_ids), r.extend_logprob_start_len) for r in reqs], 3)
        self.input_ids = np.concatenate([r.fill_ids[p:] for r, p in zip(reqs, pre.tolist(), strict=True)])
        self.out_cache_loc = self.mem.alloc_for_extend(reqs, pre, seq)
        self.req_pool_indices = _i64([r.req_pool_idx for r in reqs])
        self.seq_lens, self.prefix_lens, self.extend_lens = seq, pre, seq - pre
        for r, s, p in zip(reqs, seq.tolist(), pre.tolist(), strict=True):
            r.kv_committed_len = r.kv_allocated_len = s
            if not r.retraction_count:
                r.cached_tokens += p - r.already_computed
            r.already_computed = s
            r.is_retracted = False
        if self.return_logprob:
            self.extend_input_logprob_token_ids = self._logprob_token_ids()
        self._positions = None  # NOTE: the info stays: the requests did not change

    def _logprob_token_ids(self) -> np.ndarray:
        """For each logprob row, the prompt token it predicts (0 past the prompt)."""
        out = []
        for r, p, s, e in zip(self.reqs, self.prefix_lens.tolist(), self.seq_lens.tolist(),
                              self.extend_lens.tolist(), strict=True):
            n = e - r.extend_logprob_start_len
            start = max(p, len(r.origin_input_ids) if r.logprob_start_len == -1 else r.logprob_start_len)
            toks = r.origin_input_ids[start + 1 : s + 1][:n]
            out.extend(toks + [0] * (n - len(toks)))
        return np.clip(_i64(out), 0, self.vocab_size - 1)

    def prepare_for_decode(self) -> None:
        """Feed each request's last sampled token at position seq_len; one new slot each."""
        self.forward_mode = ForwardMode.DECODE
        self.input_ids = self.output_ids
        self.out_cache_loc = self.mem.alloc_for_decode(self.req_pool_indices, self.seq_lens)
        self.seq_lens = self.seq_lens + 1
        self.prefix_lens = self.extend_lens = self.extend_logprob_start_lens = np.zeros(0, np.int64)
        self.extend_input_logprob_token_ids = None
        self._positions = None

    def set_decode_state(self, seq_lens: np.ndarray, input_ids: np.ndarray,
                         out_cache_loc: np.ndarray, output_ids: np.ndarray) -> None:
        """The state after decode steps applied in bulk (shared.loop.decode_run): [B] arrays of
        the last scheduled step (seq_lens, input_ids, out_cache_loc) and the last sampled ids."""
        self.seq_lens, self.input_ids, self.out_cache_loc = seq_lens, input_ids, out_cache_loc
        self.output_ids = output_ids
        self._positions = None

    def mix_with_running(self, running: ScheduleBatch) -> None:
        """Append a decode-prepared running batch as 1-token extends (MIXED).

        NOTE: SGLang also sets each mixed request's fill_ids (prompt + outputs) and
        extend_input_len (1); nothing reads them for a request that keeps decoding (a
        retracted one recomputes both), so only the batch arrays carry its extend."""
        input_ids = np.concatenate((self.input_ids, running.input_ids))
        out_cache_loc = np.concatenate((self.out_cache_loc, running.out_cache_loc))
        prefix_lens = np.concatenate((self.prefix_lens, running.seq_lens - 1))
        n = len(running.reqs)
        extend_lens = np.concatenate((self.extend_lens, np.ones(n, np.int64)))
        starts = np.concatenate((self.extend_logprob_start_lens, np.zeros(n, np.int64)))
        self.merge_batch(running)
        self.forward_mode = ForwardMode.MIXED
        self.input_ids, self.out_cache_loc = input_ids, out_cache_loc
        self.prefix_lens, self.extend_lens, self.extend_logprob_start_lens = prefix_lens, extend_lens, starts
        self.decoding_reqs = list(running.reqs)

    def commit_kv_lens(self, i: int) -> None:
        """Write request i's KV length (its seq_len) back to the Req before it leaves.

        NOTE: while a request decodes, `seq_lens` here is authoritative and the Req's
        kv_committed_len / kv_allocated_len are stale (not bumped per step, to keep decode
        free of per-request Python work); every release goes through this first."""
        r = self.reqs[i]
        r.kv_committed_len = r.kv_allocated_len = int(self.seq_lens[i])

    def filter_batch(self, chunked_req_to_exclude: Req | None = None,
                     keep_indices: list[int] | None = None) -> None:
        """Keep unfinished requests (minus the excluded chunked one), or `keep_indices`."""
        if keep_indices is None:
            keep_indices = self._unfinished(chunked_req_to_exclude)
        if len(keep_indices) == len(self.reqs):
            return
        keep = _i64(keep_indices)
        self.reqs = list(_picker(keep_indices)(self.reqs))
        for name in PER_REQ_ARRAYS:
            setattr(self, name, getattr(self, name)[keep])
        self.out_cache_loc = np.zeros(0, np.int64)
        self._positions = None
        self._info = None if self._info is None else _select_info(self._info, keep_indices, keep)

    def _unfinished(self, exclude: Req | None) -> list[int]:
        """Indices of the requests not finished, minus `exclude`."""
        # NOTE: FinishReason objects are truthy, so `not reason` marks the unfinished (C speed)
        alive = map(operator.not_, map(operator.attrgetter("finished_reason"), self.reqs))
        keep = list(itertools.compress(range(len(self.reqs)), alive))
        if exclude is not None:
            keep = [i for i in keep if self.reqs[i] is not exclude]
        return keep

    def merge_batch(self, other: ScheduleBatch) -> None:
        for name in PER_REQ_ARRAYS:
            setattr(self, name, np.concatenate((getattr(self, name), getattr(other, name))))
        self.reqs = self.reqs + other.reqs
        self.out_cache_loc = np.zeros(0, np.int64)
        self._positions = None
        mine, theirs = self._info, other._info
        self._info = None if mine is None or theirs is None else _concat_info(mine, theirs)

    def remaining_new_tokens(self) -> np.ndarray:
        """[B] int64 max_new_tokens - len(output_ids) per request, between steps (after a
        result was processed), read from the batch's arrays (tests/test_scheduler_properties.py
        checks it against the requests at every admission)."""
        return self.max_new_tokens - self.output_lens()

    def new_tokens_required_next_decode(self, selected: list[int] | None = None) -> int:
        seq = self.seq_lens if selected is None else self.seq_lens[_i64(selected)]
        ps = self.mem.page_size
        return len(seq) if ps == 1 else ps * int(np.count_nonzero(seq % ps == 0))

    def check_decode_mem(self, selected: list[int] | None = None) -> bool:
        """Evict from the cache if needed; can every (selected) request decode one token?"""
        need = self.new_tokens_required_next_decode(selected)
        if self.mem.allocator.available_size() < need:
            self.mem.tree_cache.evict(need)
        return self.mem.allocator.available_size() >= need

    def retract_decode(self, held: Req | None = None) -> RetractResult:
        """Retract requests (fewest outputs first; ties: longer prompt first) until the
        rest can decode; a lone request that still cannot is aborted. `held`: a request
        outside the batch that holds KV, the chunked request whose next chunk found no room;
        it is retracted (listed last) before the lone request would be aborted.

        NOTE: SGLang never holds a chunked request back (it always adds its next chunk), so
        it has no such case; aborting the lone request there would abort one that fits the
        pool alone, while the chunked request, retracted, is prefilled again later."""
        order = sorted(range(len(self.reqs)), reverse=True,
                       key=lambda i: (len(self.reqs[i].output_ids), -len(self.reqs[i].origin_input_ids)))
        retracted, aborted = [], []
        while not retracted or not self.check_decode_mem(order):
            if len(order) == 1 and held is not None:
                retracted.append(self._retract(held, remaining=1))
                held = None
            elif len(order) == 1:
                aborted.append(self._release(order.pop(), abort=True))
                break
            else:
                i = order.pop()
                retracted.append(self._release(i, abort=False, remaining=len(order)))
        self.filter_batch(keep_indices=order)
        return RetractResult(retracted, aborted)

    def _release(self, i: int, abort: bool, remaining: int = 0) -> Req:
        """Release request i: abort it, or retract it (`_retract`)."""
        req = self.reqs[i]
        self.commit_kv_lens(i)
        if not abort:
            return self._retract(req, remaining)
        self.mem.release_kv_cache(req, is_insert=False)
        req.finished_reason = FinishReason.by_abort(RETRACT_OOM_MESSAGE)
        return req

    def _retract(self, req: Req, remaining: int) -> Req:
        """Give back `req`'s KV (its KV lengths committed) for the waiting queue, then evict
        from the cache until the `remaining` requests could decode RETRACT_DECODE_STEPS more
        steps (SGLang's release_req(idx, remaining_req_count))."""
        self.mem.release_kv_cache(req, is_insert=False)
        need = remaining * RETRACT_DECODE_STEPS
        if self.mem.allocator.available_size() < need:
            self.mem.tree_cache.evict(need)
        req.reset_for_retract()
        return req


def _build_info(reqs: list[Req]) -> PerRequestInfo:
    params = tuple(r.sampling_params for r in reqs)
    seeds = _i64([DEFAULT_SAMPLING_SEED if p.sampling_seed is None else p.sampling_seed for p in params])
    return PerRequestInfo(
        tuple(r.rid for r in reqs), params, seeds, tuple(r.output_ids for r in reqs),
        tuple(p.top_logprobs_num for p in params), any(p.return_logprob for p in params),
        np.array([bool(p.stop_token_ids) for p in params], dtype=bool))


def _select_info(info: PerRequestInfo, keep_list: list[int], keep: np.ndarray) -> PerRequestInfo:
    """The info of a filtered batch, without revisiting the requests (cost O(kept))."""
    pick = _picker(keep_list)
    params = pick(info.sampling_params)
    return PerRequestInfo(pick(info.rids), params, info.sampling_seeds[keep], pick(info.output_ids),
                          pick(info.top_logprobs_nums),
                          info.return_logprob and any(p.return_logprob for p in params),
                          info.has_stop_ids[keep])


def _picker(keep_list: list[int]):
    """t -> tuple(t[i] for i in keep_list), at C speed."""
    if len(keep_list) > 1:
        return operator.itemgetter(*keep_list)
    return lambda t: tuple(t[i] for i in keep_list)


def _concat_info(a: PerRequestInfo, b: PerRequestInfo) -> PerRequestInfo:
    return PerRequestInfo(a.rids + b.rids, a.sampling_params + b.sampling_params,
                          np.concatenate((a.sampling_seeds, b.sampling_seeds)),
                          a.output_ids + b.output_ids, a.top_logprobs_nums + b.top_logprobs_nums,
                          a.return_logprob or b.return_logprob,
                          np.concatenate((a.has_stop_ids, b.has_stop_ids)))
