"""`ShadowKV`: a shadow of the KV cache that every forward of a spec-driven run must agree
with (the conformance kit's KV invariant, issue 19 §4).

The shadow holds, per KV slot, the token id and position the last forward wrote there
(`out_cache_loc` <- `input_ids`, `positions`). Before each forward it checks, for every row
of a live request (one that has not finished: under the overlap schedule a finished
request's last row is discarded):

- it reads exactly its own tokens: slots `req_to_token[row, :seq_len]` hold its prompt and
  outputs at positions 0..seq_len-1 (a prefix-cache hit reads another request's equal
  tokens at equal positions);
- no slot it reads is on the allocator's free list;
- no slot past its radix-protected prefix is read by another row of the batch (only
  prefix-cache pages are shared);
- it holds at most max_new_tokens outputs.

A kept sample never precedes the end of its prompt: the scheduler asserts that itself
(`BatchResultProcessor`), and `check_outcomes` checks every request's final output count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from shared.batch.forward_batch import ForwardBatch

if TYPE_CHECKING:
    from shared.memory.kv_memory import KVMemory
    from shared.request.req import Req
    from shared.trace.trace import Trace


class ShadowKVError(AssertionError):
    """A forward read or wrote KV the spec says it must not."""


class ShadowKV:
    """`live` maps rid -> Req for the requests not finished (the scheduler's `reqs`)."""

    def __init__(self, mem: KVMemory, live: Mapping[str, Req]) -> None:
        slots = (mem.allocator.num_pages + 1) * mem.page_size
        self.mem, self.live = mem, live
        self.tokens = np.full(slots, -1, np.int64)     # [S] token id written at each slot
        self.positions = np.full(slots, -1, np.int64)  # [S] its position
        self.forwards = 0

    def check(self, fb: ForwardBatch) -> None:
        """Record `fb`'s KV writes, then check every live row's reads (module doc)."""
        self.tokens[fb.out_cache_loc] = fb.input_ids
        self.positions[fb.out_cache_loc] = fb.positions
        private = []
        for i, rid in enumerate(fb.rids):
            req = self.live.get(rid)
            if req is not None:
                private.append(self._check_row(fb, i, req))
        shared = np.concatenate(private) if private else np.zeros(0, np.int64)
        self._require(len(np.unique(shared)) == len(shared), fb,
                      "two rows read the same slot outside the prefix cache")
        self.forwards += 1

    def _check_row(self, fb: ForwardBatch, i: int, req: Req) -> np.ndarray:
        """Check row i's reads; return its private slots (past the cached prefix)."""
        seq = int(fb.seq_lens[i])
        slots = fb.req_to_token[fb.req_pool_indices[i], :seq].astype(np.int64)   # [seq]
        want = req.token_ids(0, seq)                                            # [seq]
        where = f"{req.rid} (row {i}, seq_len {seq})"
        self._require(np.array_equal(self.positions[slots], np.arange(seq)), fb,
                      f"{where} reads KV of other positions")
        self._require(np.array_equal(self.tokens[slots], want), fb,
                      f"{where} reads KV of other tokens")
        self._require(not self.mem.allocator.is_free(slots).any(), fb,
                      f"{where} reads a free slot")
        self._require(len(req.output_ids) <= req.sampling_params.max_new_tokens, fb,
                      f"{where} holds {len(req.output_ids)} outputs, more than max_new_tokens")
        return slots[req.cache_protected_len:]

    def _require(self, ok: bool, fb: ForwardBatch, what: str) -> None:
        if not ok:
            raise ShadowKVError(f"forward {self.forwards} ({fb.forward_mode.name}, rids "
                                f"{list(fb.rids)}): {what}")


def check_outcomes(trace: Trace) -> None:
    """Every finished request holds at most max_new_tokens outputs, and its recorded
    output ids are that many."""
    for rec in trace.requests.values():
        if rec.finish_reason is None:
            continue
        if not rec.output_len == len(rec.output_ids) <= rec.sampling_params.max_new_tokens:
            raise ShadowKVError(f"request {rec.rid}: {rec.output_len} outputs recorded "
                                f"({len(rec.output_ids)} ids) for max_new_tokens "
                                f"{rec.sampling_params.max_new_tokens}")
