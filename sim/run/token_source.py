"""Token sources: where the simulator's sampled token ids come from (ARCHITECTURE §5).

A token source answers "what is output token `index` of request `rid`?" as a pure function
of (rid, index), never of the batch the request runs in, so a schedule cannot change the
tokens and the tokens cannot change the schedule in ways the recorded run did not see.

- `SyntheticTokenSource(seed, vocab_size, eos_token_ids)`: seeded ids that are never EOS, for
  capacity planning. Requests end at their `max_new_tokens` (workloads set it to the output
  length, with `ignore_eos`), or at a stop_token_ids id drawn at or after their
  `min_new_tokens` (before it, stop ids are never drawn, as SGLang's penalizer masks them).
- `ReplayTokenSource(trace)`: the ids a recorded run produced (`RequestRecord.output_ids`),
  and, through `finished`, the requests that run ended for reasons no token explains (a stop
  string, an abort), so a replay ends each request where the recording did.

A source whose ids depend on a request's sampling parameters (the synthetic one's, on
stop_token_ids and min_new_tokens) is told them by `add_requests` before the request's
first token is drawn (`SimModelRunner.sample` does, at each prefill); they are part of the
request, so the ids are still a function of (rid, index).

`finished(batch, ids)` has the driver's `finished_hook` signature: it is called before
`Scheduler.process_batch_result` and returns the rid -> FinishReason map to pass as
`finished=`.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shared.request.finish_reason import FinishReason
from sim.run.seeded_ids import GOLDEN, MASK_64, IdDraw, mix, splitmix64, splitmix64_int

if TYPE_CHECKING:
    from shared.batch.schedule_batch import ScheduleBatch
    from shared.request.sampling_params import SamplingParams
    from shared.trace.trace import Trace


class TokenSource(ABC):
    """Contract: `token_ids(rids, indices)[i]` is output token `indices[i]` of request
    `rids[i]`, an int64 in [0, vocab_size), depending on that pair (and the request's
    sampling parameters, told by `add_requests`) only. `finished_after` and `finished`
    name the requests the source ends (none by default)."""

    def add_requests(self, rids: Sequence[str], params: Sequence[SamplingParams]) -> None:
        """Told each request's sampling parameters (rids[i] has params[i]) before its first
        token is drawn; again, harmlessly, at each of its prefill chunks. By default unused."""
        return None

    @abstractmethod
    def token_ids(self, rids: Sequence[str], indices: Sequence[int]) -> np.ndarray:
        """[B] int64: one id per (rid, output index) pair."""

    def token_matrix(self, rids: Sequence[str], first_indices: np.ndarray, steps: int) -> np.ndarray:
        """[steps, B] int64: row j holds output token first_indices[i] + j of each request
        (the next `steps` decode steps of a batch, shared.loop.decode_run)."""
        first = np.asarray(first_indices, dtype=np.int64)
        rows = [self.token_ids(rids, first + j) for j in range(steps)]
        return np.stack(rows) if rows else np.zeros((0, len(rids)), np.int64)

    def steps_before_end(self, rids: Sequence[str], output_lens: np.ndarray, steps: int) -> int:
        """Of the next `steps` decode steps (requests holding output_lens tokens now), how
        many pass before `finished` ends one of the requests (`steps` when none ends)."""
        return steps

    def finished_after(self, rid: str, output_len: int) -> FinishReason | None:
        """The reason the source ends `rid` once it has `output_len` output tokens, or None."""
        return None

    def finished(self, batch: ScheduleBatch, ids: np.ndarray) -> dict[str, FinishReason]:
        """The driver's finished hook: requests of `batch` that end with this step's token."""
        return {}


class SyntheticTokenSource(TokenSource):
    """Seeded token ids, uniform over the vocabulary minus the EOS ids; while a request told
    of by `add_requests` has fewer than its min_new_tokens outputs, uniform over the
    vocabulary minus the EOS ids and its stop_token_ids (SGLang's min_new_tokens
    penalizer). A stop id drawn later ends the request, as the model's would.

    NOTE: each request's key is a BLAKE2b hash of (seed, rid), never Python's `hash`
    (salted per process), so a seed gives the same ids in every process."""

    def __init__(self, seed: int, vocab_size: int, eos_token_ids: Iterable[int] = ()) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        self.vocab_size = vocab_size
        self.excluded = tuple(sorted({int(t) for t in eos_token_ids if 0 <= int(t) < vocab_size}))
        self._draw = IdDraw.of(vocab_size, self.excluded)
        if self._draw.choices < 1:
            raise ValueError(f"no token id in [0, {vocab_size}) is not an EOS id")
        self._keys: dict[str, int] = {}
        # NOTE: only requests whose stop ids mask more than EOS, with min_new_tokens > 0
        self._masks: dict[str, StopMask] = {}
        self._draws: dict[frozenset[int], IdDraw] = {}   # stop ids -> their draw, shared
        self._last: tuple[tuple[str, ...], np.ndarray, Masked] = NO_BATCH

    def add_requests(self, rids: Sequence[str], params: Sequence[SamplingParams]) -> None:
        for rid, p in zip(rids, params, strict=True):
            if p.min_new_tokens and p.stop_token_ids:
                self._set_mask(rid, self._stop_mask(rid, p.min_new_tokens, p.stop_token_ids))
            elif self._masks:  # NOTE: a rid told again with other parameters
                self._set_mask(rid, None)

    def _stop_mask(self, rid: str, min_new_tokens: int, stop_ids: frozenset[int]) -> StopMask | None:
        """The request's mask, or None when its stop ids are all EOS ids (never drawn)."""
        draw = self._draws.get(stop_ids)
        if draw is None:
            masked = sorted({*self.excluded, *(t for t in stop_ids if 0 <= t < self.vocab_size)})
            draw = self._draws[stop_ids] = IdDraw.of(self.vocab_size, masked)
        if draw.choices < 1:
            raise ValueError(f"request {rid!r}: its stop_token_ids and the EOS ids cover the "
                             f"vocabulary, so no token can be drawn before min_new_tokens")
        return StopMask(min_new_tokens, draw) if draw.choices < self._draw.choices else None

    def _set_mask(self, rid: str, mask: StopMask | None) -> None:
        old = self._masks.get(rid)
        if old is mask or (old is not None and mask is not None and old.min_new_tokens
                           == mask.min_new_tokens and old.draw is mask.draw):
            return
        if mask is None:
            del self._masks[rid]
        else:
            self._masks[rid] = mask
        self._last = NO_BATCH   # NOTE: the cached batch may hold rid

    def _key(self, rid: str) -> int:
        """The request's key + GOLDEN (mod 2**64), what `splitmix64` takes."""
        key = self._keys.get(rid)
        if key is None:
            digest = hashlib.blake2b(f"{self.seed}\x00{rid}".encode(), digest_size=8).digest()
            key = self._keys[rid] = (int.from_bytes(digest, "little") + int(GOLDEN)) & MASK_64
        return key

    def _batch(self, rids: Sequence[str]) -> tuple[np.ndarray, Masked]:
        """[B] uint64 keys + GOLDEN, and the (column, mask) of the batch's masked requests;
        the last batch's are reused when its rids repeat (decode)."""
        last_rids, last_keys, last_masked = self._last
        if rids == last_rids:
            return last_keys, last_masked
        try:
            keys = np.fromiter(map(self._keys.__getitem__, rids), np.uint64, len(rids))
        except KeyError:  # a request seen for the first time
            keys = np.array([self._key(r) for r in rids], dtype=np.uint64)
        masked = tuple((i, m) for i, m in enumerate(map(self._masks.get, rids))
                       if m is not None) if self._masks else ()
        self._last = (rids if isinstance(rids, tuple) else tuple(rids), keys, masked)
        return keys, masked

    def token_ids(self, rids: Sequence[str], indices: Sequence[int]) -> np.ndarray:
        if len(rids) == 1:  # e.g. a prefill of one request: the same id, in Python ints
            index = int(indices[0])
            raw = splitmix64_int(index, self._key(rids[0]))
            mask = self._masks.get(rids[0]) if self._masks else None
            draw = mask.draw if mask is not None and index < mask.min_new_tokens else self._draw
            return np.array([draw.pick(raw)], dtype=np.int64)
        keys, masked = self._batch(rids)
        z = np.asarray(indices, dtype=np.int64).astype(np.uint64)              # [B], a copy
        ids = self._draw.ids(splitmix64(z, keys))
        if masked:
            self._redraw_masked(ids[None], np.asarray(indices, dtype=np.int64), keys, masked)
        return ids

    def token_matrix(self, rids: Sequence[str], first_indices: np.ndarray, steps: int) -> np.ndarray:
        # NOTE: the state of step j is (first + j) * GOLDEN + key + GOLDEN: j * GOLDEN plus a [B] base
        keys, masked = self._batch(rids)
        first = np.asarray(first_indices, dtype=np.int64)
        base = first.astype(np.uint64)                                       # [B], a copy
        base *= GOLDEN
        base += keys
        steps_golden = np.arange(steps, dtype=np.uint64)
        steps_golden *= GOLDEN
        ids = self._draw.ids(mix(np.add.outer(steps_golden, base)))       # [k, B]
        if masked:
            self._redraw_masked(ids, first, keys, masked)
        return ids

    @staticmethod
    def _redraw_masked(ids: np.ndarray, first: np.ndarray, keys: np.ndarray,
                       masked: Masked) -> None:
        """Redraw, in place, the ids ([k, B], row j: output first + j) a masked request
        draws before its min_new_tokens (first: [B] int64 output index of row 0)."""
        for col, mask in masked:
            n = min(len(ids), mask.min_new_tokens - int(first[col]))
            if n > 0:
                z = np.arange(first[col], first[col] + n, dtype=np.uint64)   # [n]
                ids[:n, col] = mask.draw.ids(splitmix64(z, keys[col]))


class StopMask(NamedTuple):
    """A request's draw (EOS and stop ids excluded) for its outputs before min_new_tokens."""

    min_new_tokens: int
    draw: IdDraw


Masked = tuple[tuple[int, StopMask], ...]   # (column in the batch, its mask)
NO_BATCH: tuple[tuple[str, ...], np.ndarray, Masked] = ((), np.zeros(0, np.uint64), ())


def ends_externally(reason: FinishReason | None) -> bool:
    """Whether a recorded finish needs the caller to end the request: an abort, or a stop
    string (a stop token or EOS is seen by the scheduler in the replayed id itself)."""
    return reason is not None and (reason.type == "abort"
                                   or (reason.type == "stop" and isinstance(reason.matched, str)))


class ReplayTokenSource(TokenSource):
    """The token ids of a recorded run, keyed by (rid, output index).

    A read past a request's recorded outputs returns `fill_token`: that happens for rows the
    scheduler discards (an intermediate prefill chunk of a request the recording ended with no
    output), or when the replay has diverged from the recording. Requests the recording ended
    before their first token (an abort while queued or mid-prefill) cannot be replayed."""

    def __init__(self, trace: Trace, fill_token: int = 0) -> None:
        self.outputs = {rid: r.output_ids for rid, r in trace.requests.items()}
        self.fill_token = fill_token
        self.ends = {rid: (r.output_len, r.finish_reason) for rid, r in trace.requests.items()
                     if ends_externally(r.finish_reason) and r.output_len > 0}

    def token_ids(self, rids: Sequence[str], indices: Sequence[int]) -> np.ndarray:
        out = np.empty(len(rids), dtype=np.int64)
        for i, (rid, k) in enumerate(zip(rids, indices, strict=True)):
            recorded = self.outputs.get(rid)
            if recorded is None:
                raise ValueError(f"request {rid!r} is not in the replayed trace")
            out[i] = recorded[k] if k < len(recorded) else self.fill_token
        return out

    def finished_after(self, rid: str, output_len: int) -> FinishReason | None:
        end = self.ends.get(rid)
        return end[1] if end is not None and end[0] == output_len else None

    def steps_before_end(self, rids: Sequence[str], output_lens: np.ndarray, steps: int) -> int:
        # NOTE: `finished` ends rid in the step after which it holds its recorded output_len.
        for rid, have in zip(rids, np.asarray(output_lens).tolist(), strict=True):
            end = self.ends.get(rid)
            if end is not None and end[0] > have:
                steps = min(steps, end[0] - have - 1)
        return steps

    def finished(self, batch: ScheduleBatch, ids: np.ndarray) -> dict[str, FinishReason]:
        if not self.ends:
            return {}
        # NOTE: a row with is_chunked > 0 is an intermediate chunk: its token is discarded.
        hits = {}
        for req in batch.reqs:
            if req.rid in self.ends and req.is_chunked == 0:
                reason = self.finished_after(req.rid, len(req.output_ids) + 1)
                if reason is not None:
                    hits[req.rid] = reason
        return hits
