"""Turning a forward's sampled tokens into request progress (semantics §7.5–§7.6).

Prefill: an intermediate chunk's token is discarded (recorded as -1); otherwise the token
is appended, the request is checked for a finish, and an unfinished request's KV goes into
the prefix cache. Decode: append, check, and release finished requests' KV. Then the step
is recorded into the trace.

Under the overlap schedule a step's result is processed after the next step was scheduled
(`LaunchedStep` keeps what processing needs): rows of requests that finished or were
retracted in between are discarded (SGLang's `req.finished() or req.is_retracted` skip),
and a request finishing here also frees the slots the next step allocated for it.
"""

from __future__ import annotations

import itertools
import operator
from typing import NamedTuple

import numpy as np

from shared.batch.logit_rows import recorded_decode_rows
from shared.batch.schedule_batch import ScheduleBatch
from shared.loop.model_runner import RunnerOutput
from shared.loop.step_recorder import StepRecorder, StepTimes
from shared.memory.kv_memory import KVMemory
from shared.request.finish_reason import FinishReason
from shared.request.req import Req
from shared.trace.trace import RequestRecord

_FINISHED_REASON = operator.attrgetter("finished_reason")
_IS_RETRACTED = operator.attrgetter("is_retracted")


class LaunchedStep(NamedTuple):
    """A forward whose sampled ids are known and whose result is not processed yet."""

    batch: ScheduleBatch         # as launched (ScheduleBatch.copy_for_result under overlap)
    output: RunnerOutput
    ids: np.ndarray              # [B] int64 sampled ids, a private copy
    times: StepTimes             # start, end; queue and KV in use (overlap: at launch)
    finished: dict               # rid -> FinishReason the caller ends after this token
    quiet: bool = False          # a decode the caller knows finishes and discards nothing
    mark: int = -1               # the scheduler's finish count when the step was scheduled


def check_finished(req: Req, token: int, eos_ids: frozenset[int], vocab_size: int) -> FinishReason | None:
    """SGLang's order: a pending abort, the length limit, stop tokens and EOS (unless
    ignore_eos), then a token outside the vocabulary."""
    p = req.sampling_params
    if req.to_finish is not None:
        return req.to_finish
    if len(req.output_ids) >= p.max_new_tokens:
        return FinishReason.by_length(p.max_new_tokens)
    if not p.ignore_eos and (token in eos_ids or (p.stop_token_ids and token in p.stop_token_ids)):
        return FinishReason.by_stop(token)
    if not 0 <= token < vocab_size:
        return FinishReason.by_abort(f"sampled token id {token} is outside the vocabulary "
                                     f"[0, {vocab_size}) (NaN in the logits?)")
    return None


class BatchResultProcessor:
    """The result half of the scheduler. It owns no scheduler state: it changes the
    requests, their KV (`mem`) and their records (`requests`, the trace's), and records
    steps through `recorder`; what it needs of the scheduler's state comes in as arguments,
    and the requests it finishes go back to the scheduler, which forgets them."""

    def __init__(self, mem: KVMemory, requests: dict[str, RequestRecord],
                 recorder: StepRecorder, eos_token_ids, vocab_size: int) -> None:
        self.mem = mem
        self.requests = requests
        self.recorder = recorder
        self.vocab_size = vocab_size
        self.eos = frozenset(eos_token_ids)
        self.eos_array = np.array(sorted(self.eos), dtype=np.int64)

    def process(self, step: LaunchedStep, *, discard: bool, aborts_pending: bool,
                chunked_req: Req | None, inflight: ScheduleBatch | None = None) -> list[Req]:
        """Apply `step`'s result; returns the requests it finished. `discard`: a request
        finished or was retracted since the step was scheduled (overlap), so rows may be
        discarded; `aborts_pending`: some request has a pending abort; `chunked_req`: the
        request chunked now (no caller finish applies to it); `inflight`: the batch
        scheduled since (overlap), whose slots for a request that finishes now are freed
        with it."""
        batch, ids = step.batch, step.ids
        gone = self._discarded(batch) if discard else None
        if step.quiet and gone is None:  # a decode run's last step, no finish possible
            list(map(list.append, batch.per_request_info().output_ids, ids.tolist()))
            self._record(batch, step, ids, None)
            return []
        if batch.forward_mode.is_extend():
            done, recorded = self._process_prefill(batch, ids, step.times.end, gone, inflight,
                                                   aborts_pending)
        else:
            done, recorded = self._process_decode(batch, ids, step.times.end, gone, inflight,
                                                  aborts_pending)
        done += self._apply_external_finishes(batch, step.finished, step.times.end, inflight,
                                              chunked_req)
        self._record(batch, step, recorded, gone)
        return done

    def process_decoded(self, batch: ScheduleBatch, ids: np.ndarray, times: StepTimes,
                        graph: bool, padded_batch_size: int, *, aborts_pending: bool,
                        inflight: ScheduleBatch | None = None) -> list[Req]:
        """`process` for a decode step whose ids ([B]) every request's output_ids already end
        with (a step of a decode run, shared.loop.decode_run), with no caller finishes and no row
        to discard; the arguments as `process`'s."""
        done = self._finish_decoded(batch, ids, times.end, aborts_pending, inflight=inflight)
        batch.output_ids = ids
        output = RunnerOutput(recorded_decode_rows(len(batch)), (len(batch), 0), graph=graph,
                              padded_batch_size=padded_batch_size)
        self._record(batch, LaunchedStep(batch, output, ids, times, {}), ids, None)
        return done

    def _record(self, batch: ScheduleBatch, step: LaunchedStep, recorded: np.ndarray,
                gone: np.ndarray | None) -> None:
        out = step.output
        self.recorder.record(batch, out.logit_rows, out.graph, out.padded_batch_size, recorded,
                             step.times, gone)

    def _discarded(self, batch: ScheduleBatch) -> np.ndarray | None:
        """[B] bool: rows of requests that finished or were retracted after this step was
        scheduled (overlap only), or None when there are none."""
        # NOTE: FinishReason objects are truthy: `truth(reason)` is "finished" (C-level maps,
        # no Python frame per row)
        reqs = batch.reqs
        if not any(map(_FINISHED_REASON, reqs)) and not any(map(_IS_RETRACTED, reqs)):
            return None
        gone = np.fromiter(map(operator.truth, map(_FINISHED_REASON, reqs)), bool, len(reqs))
        gone |= np.fromiter(map(_IS_RETRACTED, reqs), bool, len(reqs))
        return gone

    def _process_decode(self, batch: ScheduleBatch, ids: np.ndarray, now: float,
                        gone: np.ndarray | None, inflight: ScheduleBatch | None,
                        aborts_pending: bool):
        outputs = batch.per_request_info().output_ids
        if gone is None:
            list(map(list.append, outputs, ids.tolist()))
            return self._finish_decoded(batch, ids, now, aborts_pending, inflight=inflight), ids
        recorded = np.where(gone, -1, ids)
        _append_kept(outputs, ids.tolist(), gone)
        return self._finish_decoded(batch, ids, now, aborts_pending, gone=gone,
                                    inflight=inflight), recorded

    def _process_prefill(self, batch: ScheduleBatch, ids: np.ndarray, now: float,
                         gone: np.ndarray | None, inflight: ScheduleBatch | None,
                         aborts_pending: bool):
        """An EXTEND or MIXED step: the prefill rows one by one, then (MIXED) the decode
        rows mixed in after them as a decode step's are processed."""
        recorded = ids.copy()
        n = len(batch) - len(batch.decoding_reqs)                    # prefill rows come first
        skip = np.zeros(len(batch), bool) if gone is None else gone.copy()  # [B] no token kept
        done = []
        for i, (req, tok) in enumerate(zip(batch.reqs[:n], ids[:n].tolist(), strict=True)):
            if skip[i]:
                continue
            if req.is_chunked > 0:
                req.is_chunked -= 1
                skip[i] = True
                if req.to_finish is not None:  # NOTE: the scheduler un-chunks it (finished)
                    self._finish(batch, i, req.to_finish, now, inflight)
                    done.append(req)
                continue
            # NOTE: a kept sample follows the whole prompt and every earlier output.
            assert batch.seq_lens[i] == req.seqlen, \
                f"{req.rid}: a token sampled with {batch.seq_lens[i]} of {req.seqlen} tokens in the KV cache"
            if self._append_and_check(batch, i, tok, now, inflight):
                done.append(req)
            else:
                self.mem.tree_cache.cache_unfinished_req(req)
        if n < len(batch):
            _append_kept(batch.per_request_info().output_ids[n:], ids[n:].tolist(), skip[n:])
            done += self._finish_decoded(batch, ids, now, aborts_pending, start=n, gone=gone,
                                         inflight=inflight)
        recorded[skip] = -1
        return done, recorded

    def _finish_decoded(self, batch: ScheduleBatch, ids: np.ndarray, now: float,
                        aborts_pending: bool, start: int = 0, gone: np.ndarray | None = None,
                        inflight: ScheduleBatch | None = None) -> list[Req]:
        """Finish the requests of a decode step (rows `start` on, not `gone`) whose tokens
        `ids` were appended."""
        maybe = self.may_finish(batch, ids)
        if aborts_pending:
            maybe |= np.array([r.to_finish is not None for r in batch.reqs], dtype=bool)
        if gone is not None:
            maybe &= ~gone
        done = []
        for i in (np.flatnonzero(maybe[start:]) + start).tolist():
            req = batch.reqs[i]
            reason = check_finished(req, int(ids[i]), self.eos, batch.vocab_size)
            if reason is not None:
                self._finish(batch, i, reason, now, inflight)
                done.append(req)
        return done

    def may_finish(self, batch: ScheduleBatch, ids: np.ndarray) -> np.ndarray:
        """Which rows of a decode step whose tokens `ids` ([B]) were appended may have
        finished (a superset; check_finished decides). Pending aborts are not included."""
        maybe = batch.output_lens() >= batch.max_new_tokens
        maybe |= self.may_finish_by_token(batch, ids)
        return maybe

    def may_finish_by_token(self, batch: ScheduleBatch, ids: np.ndarray) -> np.ndarray:
        """may_finish's test of the ids alone ([B], or [k, B]): outside the vocabulary, or an
        EOS or stop id of a request that does not ignore EOS."""
        # NOTE: a negative id read as unsigned is >= vocab_size, so one comparison finds ids
        # outside the vocabulary.
        maybe = ids.view(np.uint64) >= batch.vocab_size
        if batch.ignore_eos.all():
            return maybe
        eos_hit = (ids[..., None] == self.eos_array).any(axis=-1)  # np.isin is ~5x slower here
        maybe |= ~batch.ignore_eos & (eos_hit | batch.per_request_info().has_stop_ids)
        return maybe

    def _append_and_check(self, batch: ScheduleBatch, i: int, tok: int, now: float,
                          inflight: ScheduleBatch | None) -> bool:
        req = batch.reqs[i]
        req.output_ids.append(tok)
        record = self.requests[req.rid]
        if record.first_token_time != record.first_token_time:  # NaN: the first token
            record.first_token_time = now
        reason = check_finished(req, tok, self.eos, self.vocab_size)
        if reason is not None:
            self._finish(batch, i, reason, now, inflight)
        return reason is not None

    def _apply_external_finishes(self, batch: ScheduleBatch, finished: dict[str, FinishReason],
                                 now: float, inflight: ScheduleBatch | None,
                                 chunked_req: Req | None) -> list[Req]:
        if not finished:
            return []
        done = []
        for i, req in enumerate(batch.reqs):
            reason = finished.get(req.rid)
            if reason is not None and not req.finished() and req.is_chunked == 0 \
                    and req is not chunked_req and not req.is_retracted:
                self._finish(batch, i, reason, now, inflight)
                done.append(req)
        return done

    def _finish(self, batch: ScheduleBatch, i: int, reason: FinishReason, now: float,
                inflight: ScheduleBatch | None = None) -> None:
        req = batch.reqs[i]
        req.finished_reason = reason
        batch.commit_kv_lens(i)
        self.mem.release_kv_cache(req, allocated_len=_allocated_len(req, inflight))
        self.record_finished(req, now)

    def record_finished(self, req: Req, now: float) -> None:
        """Write a finished request's outcome into its record."""
        rec = self.requests[req.rid]
        rec.output_len = len(req.output_ids)
        rec.output_ids = tuple(req.output_ids)
        rec.finish_reason = req.finished_reason
        rec.finish_time = now
        rec.cached_tokens = req.cached_tokens
        rec.num_retractions = req.retraction_count

    def finish_unscheduled(self, req: Req, message: str, now: float) -> None:
        """Abort a request that holds no KV (still waiting) at `now`."""
        req.finished_reason = FinishReason.by_abort(message)
        self.record_finished(req, now)


def _append_kept(outputs: tuple[list[int], ...], tokens: list[int], gone: np.ndarray) -> None:
    """Append tokens[i] to outputs[i] for each row i not `gone` ([B] bool), at C speed."""
    kept = (~gone).tolist()
    list(map(list.append, itertools.compress(outputs, kept), itertools.compress(tokens, kept)))


def _allocated_len(req: Req, inflight: ScheduleBatch | None) -> int:
    """The KV length the in-flight batch allocated for `req` (0 when it holds no row of it)."""
    if inflight is None:
        return 0
    try:  # NOTE: Req compares by identity (eq=False), so list.index finds this very request
        i = inflight.reqs.index(req)
    except ValueError:
        return 0
    return int(inflight.seq_lens[i])
