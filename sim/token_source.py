"""Token sources: where the simulator's sampled token ids come from (ARCHITECTURE §5).

A token source answers "what is output token `index` of request `rid`?" as a pure function
of (rid, index), never of the batch the request runs in, so a schedule cannot change the
tokens and the tokens cannot change the schedule in ways the recorded run did not see.

- `SyntheticTokenSource(seed, vocab_size, eos_token_ids)`: seeded ids that are never EOS, for
  capacity planning. Requests end at their `max_new_tokens` (workloads set it to the output
  length, with `ignore_eos`).
- `ReplayTokenSource(trace)`: the ids a recorded run produced (`RequestRecord.output_ids`),
  and, through `finished`, the requests that run ended for reasons no token explains (a stop
  string, an abort), so a replay ends each request where the recording did.

`finished(batch, ids)` has the driver's `finished_hook` signature: it is called before
`Scheduler.process_batch_result` and returns the rid -> FinishReason map to pass as
`finished=`.
"""

from __future__ import annotations

import bisect
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from shared.finish_reason import FinishReason

if TYPE_CHECKING:
    from shared.schedule_batch import ScheduleBatch
    from shared.trace import Trace

# splitmix64 (Steele, Lea, Flood 2014): state_i = key + (i + 1) * GOLDEN, output = mix(state_i).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_2 = np.uint64(0x94D049BB133111EB)
SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
MASK_64 = (1 << 64) - 1


class TokenSource(ABC):
    """Contract: `token_ids(rids, indices)[i]` is output token `indices[i]` of request
    `rids[i]`, an int64 in [0, vocab_size), depending on that pair only. `finished_after`
    and `finished` name the requests the source ends (none by default)."""

    @abstractmethod
    def token_ids(self, rids: Sequence[str], indices: Sequence[int]) -> np.ndarray:
        """[B] int64: one id per (rid, output index) pair."""

    def token_matrix(self, rids: Sequence[str], first_indices: np.ndarray, steps: int) -> np.ndarray:
        """[steps, B] int64: row j holds output token first_indices[i] + j of each request
        (the next `steps` decode steps of a batch, shared.decode_run)."""
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


def splitmix64(z: np.ndarray, keys_plus_golden: np.ndarray) -> np.ndarray:
    """uint64 element-wise: output z of the splitmix64 stream seeded with key, computed in
    place in `z` (wrapping). Takes key + GOLDEN, as the state (z + 1) * GOLDEN + key equals
    z * GOLDEN + (key + GOLDEN)."""
    z *= GOLDEN
    z += keys_plus_golden
    return _mix(z)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function of the states `z`, in place (one scratch array)."""
    t = z >> SHIFTS[0]
    z ^= t
    z *= MIX_1
    np.right_shift(z, SHIFTS[1], out=t)
    z ^= t
    z *= MIX_2
    np.right_shift(z, SHIFTS[2], out=t)
    z ^= t
    return z


def splitmix64_int(z: int, key_plus_golden: int) -> int:
    """`splitmix64` of one value, in Python ints (a single row costs ~10x less than numpy)."""
    z = (z * int(GOLDEN) + key_plus_golden) & MASK_64
    z ^= z >> int(SHIFTS[0])
    z = (z * int(MIX_1)) & MASK_64
    z ^= z >> int(SHIFTS[1])
    z = (z * int(MIX_2)) & MASK_64
    return z ^ (z >> int(SHIFTS[2]))


def skip_ids(values: np.ndarray, excluded: Sequence[int]) -> np.ndarray:
    """Map values in [0, V - len(excluded)) one-to-one onto [0, V) minus `excluded`
    (sorted ascending, each in [0, V))."""
    return _shift_past(values.astype(np.int64), skip_thresholds(excluded))


def skip_thresholds(excluded: Sequence[int]) -> np.ndarray:
    """[k] int64 e_k - k for the sorted excluded ids e (non-decreasing)."""
    return np.asarray(excluded, dtype=np.int64) - np.arange(len(excluded))


def _shift_past(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """skip_ids on int64 values. NOTE: adding 1 at each excluded e in turn (ascending) sends
    v to v + #{k: v >= e_k - k}; the thresholds are sorted, so one searchsorted counts them."""
    if len(thresholds):
        values += thresholds.searchsorted(values, side="right")
    return values


class SyntheticTokenSource(TokenSource):
    """Seeded token ids, uniform over the vocabulary minus the EOS ids.

    NOTE: each request's key is a BLAKE2b hash of (seed, rid), never Python's `hash`
    (salted per process), so a seed gives the same ids in every process."""

    def __init__(self, seed: int, vocab_size: int, eos_token_ids: Iterable[int] = ()) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        self.vocab_size = vocab_size
        self.excluded = tuple(sorted({int(t) for t in eos_token_ids if 0 <= int(t) < vocab_size}))
        self._choices = vocab_size - len(self.excluded)
        self._choices_u64 = np.uint64(self._choices)
        self._thresholds = skip_thresholds(self.excluded)
        self._threshold_list = self._thresholds.tolist()
        if self._choices < 1:
            raise ValueError(f"no token id in [0, {vocab_size}) is not an EOS id")
        self._keys: dict[str, int] = {}
        self._last: tuple[tuple[str, ...], np.ndarray] = ((), np.zeros(0, np.uint64))

    def _key(self, rid: str) -> int:
        """The request's key + GOLDEN (mod 2**64), what `splitmix64` takes."""
        key = self._keys.get(rid)
        if key is None:
            digest = hashlib.blake2b(f"{self.seed}\x00{rid}".encode(), digest_size=8).digest()
            key = self._keys[rid] = (int.from_bytes(digest, "little") + int(GOLDEN)) & MASK_64
        return key

    def _batch_keys(self, rids: Sequence[str]) -> np.ndarray:
        """[B] uint64 keys + GOLDEN; the last batch's are reused when its rids repeat (decode)."""
        last_rids, last_keys = self._last
        if rids == last_rids:
            return last_keys
        try:
            keys = np.fromiter(map(self._keys.__getitem__, rids), np.uint64, len(rids))
        except KeyError:  # a request seen for the first time
            keys = np.array([self._key(r) for r in rids], dtype=np.uint64)
        self._last = (rids if isinstance(rids, tuple) else tuple(rids), keys)
        return keys

    def token_ids(self, rids: Sequence[str], indices: Sequence[int]) -> np.ndarray:
        if len(rids) == 1:  # e.g. a prefill of one request: the same id, in Python ints
            raw = splitmix64_int(int(indices[0]), self._key(rids[0]))
            skip = bisect.bisect_right(self._threshold_list, raw % self._choices)
            return np.array([raw % self._choices + skip], dtype=np.int64)
        z = np.asarray(indices, dtype=np.int64).astype(np.uint64)              # [B], a copy
        return self._ids(splitmix64(z, self._batch_keys(rids)))

    def token_matrix(self, rids: Sequence[str], first_indices: np.ndarray, steps: int) -> np.ndarray:
        # NOTE: the state of step j is (first + j) * GOLDEN + key + GOLDEN: j * GOLDEN plus a [B] base
        base = np.asarray(first_indices, dtype=np.int64).astype(np.uint64)    # [B], a copy
        base *= GOLDEN
        base += self._batch_keys(rids)
        steps_golden = np.arange(steps, dtype=np.uint64)
        steps_golden *= GOLDEN
        return self._ids(_mix(np.add.outer(steps_golden, base)))             # [k, B]

    def _ids(self, raw: np.ndarray) -> np.ndarray:
        raw %= self._choices_u64
        return _shift_past(raw.view(np.int64), self._thresholds)   # < 2**63: same values


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
