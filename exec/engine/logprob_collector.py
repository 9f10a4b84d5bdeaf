"""Per-request logprobs gathered across steps (semantics §10.4, §11.4).

Input logprobs arrive chunk by chunk: request i owns `extend_seq_len - extend_logprob_start_len`
rows of each prefill step. On return they read `[None] + rows[:-1]`: nothing predicts the
first requested token, and the last row predicts the first *output* token. A re-prefill
after retraction adds nothing (the request already has outputs). Output logprobs: one per
kept token (an intermediate chunk's token is discarded).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from shared.batch.forward_batch import ForwardBatch
from shared.batch.schedule_batch import ScheduleBatch
from shared.loop.model_runner import RunnerOutput
from shared.request.req import Req


class RequestLogprobs(NamedTuple):
    input_token_logprobs: list[float | None] | None
    input_top_logprobs: list[Any] | None
    output_token_logprobs: list[float] | None
    output_top_logprobs: list[Any] | None = None   # per output token, (token id, logprob) pairs


class LogprobCollector:
    def __init__(self) -> None:
        self._input: dict[str, list[float]] = {}
        self._input_top: dict[str, list[Any]] = {}
        self._output: dict[str, list[float]] = {}
        self._output_top: dict[str, list[Any]] = {}

    def collect(self, batch: ScheduleBatch, fb: ForwardBatch, out: RunnerOutput, sample: Any) -> None:
        """Call after `sample`, before `process_batch_result` (chunk counters still set)."""
        if not fb.return_logprob:
            return
        if out.input_token_logprobs is not None:
            self._collect_input(batch, fb, out)
        values = sample.next_token_logprobs.tolist()
        for req, value, top in zip(batch.reqs, values, sample.top_logprobs, strict=True):
            if req.return_logprob and req.is_chunked == 0 and not req.finished():
                self._keep(self._output, req, value)
                if req.sampling_params.top_logprobs_num > 0:
                    self._keep(self._output_top, req, top)

    @staticmethod
    def _keep(store: dict[str, list[Any]], req: Req, value: Any) -> None:
        kept = store.setdefault(req.rid, [])
        # NOTE: one value per output token: under overlap a retraction discards the token
        # of a step not processed yet, and its value with it
        del kept[len(req.output_ids):]
        kept.append(value)

    def _collect_input(self, batch: ScheduleBatch, fb: ForwardBatch, out: RunnerOutput) -> None:
        counts = (fb.extend_seq_lens - fb.extend_logprob_start_lens).tolist()
        values = out.input_token_logprobs.tolist()
        tops = out.input_top_logprobs
        start = 0
        for req, n in zip(batch.reqs, counts, strict=True):
            if req.return_logprob and not req.output_ids:
                self._input.setdefault(req.rid, []).extend(values[start : start + n])
                if tops is not None:
                    self._input_top.setdefault(req.rid, []).extend(tops[start : start + n])
            start += n

    def output_logprobs(self, rid: str, start: int, stop: int) -> tuple[float, ...]:
        """The logprobs of output tokens [start, stop) of request `rid`, collected so far
        (empty when it asked for none); leaves them in place."""
        return tuple(self._output.get(rid, ())[start:stop])

    def output_top_logprobs(self, rid: str, start: int, stop: int) -> tuple[Any, ...]:
        """Output tokens [start, stop)'s top (token id, logprob) pairs, most likely first
        (empty when the request asked for no top logprobs)."""
        return tuple(self._output_top.get(rid, ())[start:stop])

    def pop(self, req: Req) -> RequestLogprobs:
        """The request's logprobs, in SGLang's layout; forgets them."""
        if not req.return_logprob:
            return RequestLogprobs(None, None, None)
        rows = self._input.pop(req.rid, [])
        tops = self._input_top.pop(req.rid, None)
        return RequestLogprobs([None, *rows[:-1]] if rows else [],
                               [None, *tops[:-1]] if tops else None,
                               self._output.pop(req.rid, []), self._output_top.pop(req.rid, None))
