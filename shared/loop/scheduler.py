"""`Scheduler`: SGLang's event loop, minus the I/O (semantics §7).

The driver calls, once per step:

    batch = scheduler.get_next_batch_to_run(now)          # None: nothing to run
    fb = ForwardBatch.init_new(batch)
    out = runner.forward(fb); ids = runner.sample(out, fb)
    finished = scheduler.process_batch_result(batch, out, ids, now_after)

Prefill has priority; the chunked request is stashed into the prefix cache between
chunks; with `enable_mixed_chunk` a prefill chunk carries the running decodes (MIXED);
otherwise the running batch decodes, retracting requests when the KV pool is short.
`now` is recorded into the trace and never changes a decision.

The overlap schedule (SGLang's default; `disable_overlap_schedule=True` turns it off):
`process_batch_result` keeps the step's result as launched, and the next
`get_next_batch_to_run` schedules the next batch first and processes that result after,
as SGLang's overlap loop processes batch N while N+1 runs. So a request finishing in step
N still holds a (discarded) row in step N+1, and the KV it frees is admitted one step later.
The driver loop is the same for both schedules; requests finish in whichever call processed
their last result (`take_finished`).
"""

from __future__ import annotations

import random

import numpy as np

from shared.admission.prefill_adder import PrefillAdder
from shared.admission.prefill_admission import PrefillAdmission
from shared.admission.schedule_policy import SchedulePolicy
from shared.batch.logit_rows import recorded_decode_rows
from shared.batch.schedule_batch import ScheduleBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.batch_result import BatchResultProcessor, LaunchedStep
from shared.loop.decode_run import DecodeRunLimit, DecodeRuns, RunEnd, RunPrice, decode_run_limit
from shared.loop.failed_step import abort_failed, keep_rows
from shared.loop.model_runner import RunnerOutput
from shared.loop.new_token_ratio import NewTokenRatio
from shared.loop.scheduler_load import SchedulerLoad, scheduler_load
from shared.loop.step_recorder import StepRecorder, StepTimes
from shared.memory.kv_memory import KVMemory
from shared.request.finish_reason import FinishReason
from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req
from shared.request.validation import validate_prebuilt_outputs, validate_request
from shared.trace.run_log import FULL_TRACE, Keep
from shared.trace.trace import RequestRecord, TraceHeader


class Scheduler:
    def __init__(self, config: EngineConfig, model_info: ModelInfo, *,
                 kv_capacity: int | None = None, header: TraceHeader | None = None,
                 keep: Keep = FULL_TRACE) -> None:
        self.config = config = config.resolve(model_info, kv_capacity)
        self.model_info = model_info
        self.mem = KVMemory.build(
            max_running_requests=config.max_running_requests,
            max_context_len=config.context_length, max_total_tokens=config.max_total_tokens,
            page_size=config.page_size, disable_radix_cache=config.disable_radix_cache)
        self.policy = SchedulePolicy(config.schedule_policy, self.mem.tree_cache,
                                     random.Random(config.random_seed))
        self.new_token_ratio = NewTokenRatio(config.schedule_conservativeness,
                                             config.guaranteed_no_evict)
        header = header or TraceHeader()   # the model's config.json, the executor (TraceHeader)
        # NOTE: a Trace, or under Keep(trace=False) a RunLog: the same calls record into both
        self.trace = keep.new_log(config, model_info, dict(header.model_config),
                                  dict(header.executor))
        recorder = StepRecorder(self.trace, self.mem)
        self.results = BatchResultProcessor(self.mem, self.trace.requests, recorder,
                                            model_info.eos_token_ids, model_info.vocab_size)
        self.decode_runs = DecodeRuns(self.mem, self.results, recorder)
        self.admission = PrefillAdmission(self.mem, self.policy, config)
        self.waiting_queue: list[Req] = []
        self.running_batch: ScheduleBatch | None = None
        self.chunked_req: Req | None = None
        self.last_batch: ScheduleBatch | None = None
        self.batch_is_full = False
        self.reqs: dict[str, Req] = {}
        self.pending_aborts: set[str] = set()
        self._finished_since_filter = False
        self.pending: LaunchedStep | None = None  # overlap: the launched step not yet processed
        self._finished: list[Req] = []             # finished since the last take_finished
        self.finish_count = 0   # requests finished or retracted so far (LaunchedStep.mark)
        self._mark = 0          # finish_count when the last batch was scheduled
        self.step_start = 0.0

    # --- requests ----------------------------------------------------------------------

    def add_request(self, req: Req) -> None:
        """Validate and queue `req`. Raises InvalidRequestError (nothing queued) if the
        request could never be served, or if its rid is already in use.

        A request may arrive with outputs already produced elsewhere (`req.output_ids` not
        empty: SGLang's PREBUILT path, a disaggregated decode server receiving the prefill's
        first token): it is served as a retracted request is re-admitted, an extend over
        prompt + outputs whose sample is output index len(output_ids), and its length and
        stop checks count those outputs (max_new_tokens and min_new_tokens are the whole
        request's). Its record keeps them (`prebuilt_output_ids`) and takes its arrival as
        its first token's time."""
        if req.rid in self.reqs or req.rid in self.trace.requests:
            raise InvalidRequestError("rid", req.rid, "a request with this id was already submitted")
        self.check_request(req)
        self.reqs[req.rid] = req
        self.waiting_queue.append(req)
        # NOTE: a RunLog's live record reads the request's own prompt (it keeps its length,
        # and for a trace file its ids, at the finish): no copy per waiting request
        prompt = tuple(req.origin_input_ids) if self.trace.copies_prompts else req.origin_input_ids
        record = RequestRecord(req.rid, req.arrival_time, prompt, req.sampling_params)
        if req.output_ids:
            record.prebuilt_output_ids = tuple(req.output_ids)
            record.first_token_time = req.arrival_time
        self.trace.add_request(record)

    def check_request(self, req: Req) -> None:
        """Raise InvalidRequestError if `req` could never be served here (its prompt and
        parameters against the vocabulary, the context and the KV pool, and the outputs it
        arrived with, if any); changes nothing."""
        cfg, info = self.config, self.model_info
        validate_request(req.origin_input_array, req.sampling_params,
                         vocab_size=info.vocab_size, context_len=cfg.context_length,
                         max_total_tokens=cfg.max_total_tokens, page_size=cfg.page_size)
        if req.output_ids:
            validate_prebuilt_outputs(req.output_ids, req.sampling_params,
                                      vocab_size=info.vocab_size, eos_token_ids=info.eos_token_ids)

    def abort(self, rid: str, message: str = "aborted by the client") -> bool:
        """End a waiting request now, or a running one at its next result. False if the
        request is unknown or already finished."""
        req = self.reqs.get(rid)
        if req is None or req.finished():
            return False
        if req in self.waiting_queue and req is not self.chunked_req:
            self.waiting_queue.remove(req)
            self.results.finish_unscheduled(req, message, self.step_start)
            self._forget([req])
        else:
            req.to_finish = FinishReason.by_abort(message)
            self.pending_aborts.add(rid)
        return True

    def is_idle(self) -> bool:
        """Nothing waiting, chunked or running (finished requests not yet filtered out do
        not count): the next `get_next_batch_to_run` returns None and runs the idle check."""
        running = self.running_batch.reqs if self.running_batch else []
        # NOTE: without overlap, a prefill's requests are in last_batch until the next poll
        # merges them into the running batch
        last = self.last_batch.reqs if self.last_batch is not None else []
        return (not self.waiting_queue and self.chunked_req is None and self.pending is None
                and all(r.finished() for r in running) and all(r.finished() for r in last))

    def has_work(self) -> bool:
        return bool(self.waiting_queue or self.chunked_req or self.pending is not None
                    or (self.running_batch and not self.running_batch.is_empty()))

    def load(self) -> SchedulerLoad:
        """Requests and tokens running and queued now (`shared.loop.scheduler_load`)."""
        return scheduler_load(self.waiting_queue, (self.running_batch, self.last_batch),
                              self.chunked_req)

    def take_finished(self) -> list[Req]:
        """The requests that finished since the last call (results, aborts, retraction
        aborts), in finishing order."""
        done, self._finished = self._finished, []
        return done

    # --- scheduling --------------------------------------------------------------------

    def get_next_batch_to_run(self, now: float) -> ScheduleBatch | None:
        """The next batch to run (None: nothing can run now). Under overlap the last
        step's result is processed here, after this batch was scheduled:
        `schedule_next` then `process_last`, which an executor may split to run the
        batch's forward while the last result is processed."""
        return self.process_last(self.schedule_next(now))

    def admission_time(self, now: float) -> float:
        """The latest arrival the next `get_next_batch_to_run(now)` may hold: under overlap,
        with a launched step not yet processed, that step's start (SGLang's overlap loop
        receives and schedules the next batch as soon as a step is launched, so a request
        arriving while step N runs is first scheduled into step N + 2, semantics §7.1);
        else `now`. A driver adds the requests that arrived by then, and when the call
        finds nothing to run, adds the rest that arrived by `now` and calls again (the
        loop's next turn)."""
        return now if self.pending is None else self.pending.times.start

    def schedule_next(self, now: float) -> ScheduleBatch | None:
        """Schedule the next batch; under overlap the last result stays unprocessed."""
        self.step_start = now
        self._mark = self.finish_count
        batch = self._schedule()
        self.last_batch = batch
        if batch is None and not self.has_work():
            self._on_idle()
        return batch

    def process_last(self, inflight: ScheduleBatch | None) -> ScheduleBatch | None:
        """Process the launched step's result, `inflight` (from schedule_next) scheduled
        since. Returns `inflight`, or when it is None the batch that what the result freed
        lets run (SGLang's next loop turn; None if nothing)."""
        if self.pending is None:
            return inflight
        self._process_pending(inflight)
        if inflight is not None:
            return inflight
        return self.schedule_next(self.step_start)

    def _schedule(self) -> ScheduleBatch | None:
        self._merge_last_batch()
        batch = self._get_new_batch_prefill()
        if batch is None and self.running_batch is not None:
            batch = self._update_running_batch(self.running_batch)
            if batch is None:  # NOTE: SGLang's next loop turn: nothing ran in between
                batch = self._get_new_batch_prefill()
        return batch

    def process_batch_result(self, batch: ScheduleBatch, output: RunnerOutput, next_token_ids,
                             now: float, finished=None) -> list[Req]:
        """The step `batch` ended at `now` with these sampled ids: append them, finish
        requests, release their KV, record the step (under overlap: at the next
        `get_next_batch_to_run`). `finished` maps rid -> FinishReason for requests the
        caller ends after this token (e.g. a stop string). Returns take_finished()."""
        ids = np.array(next_token_ids, dtype=np.int64).reshape(-1)  # [B], a private copy
        if len(ids) != len(batch):
            raise ValueError(f"next_token_ids has {len(ids)} entries for a batch of {len(batch)}")
        batch.output_ids = ids  # the next decode's inputs (SGLang's future token ids)
        times = StepTimes(self.step_start, now, len(self.waiting_queue), None)
        step = LaunchedStep(batch, output, ids, times, finished or {},
                            mark=self._mark if self.config.overlap else self.finish_count)
        if self.config.overlap:
            self._launch(step)
        else:
            self._process(step)
        return self.take_finished()

    def fail_batch(self, batch: ScheduleBatch, errors: dict[str, str], now: float) -> None:
        """The forward or sampling of `batch` (scheduled, no result given yet) raised for
        the requests in `errors` (rid -> message, the error): each ends aborted at `now`
        (a pending abort keeps its own reason) and gives back its KV and request row, the
        slots this batch allocated for it included. The batch keeps its other rows, still
        prepared, minus those of requests finished since it was scheduled (overlap: by the
        result processed during its forward), for the caller to run again and hand to
        `process_batch_result` as usual; a batch left empty gets no result. The aborted
        requests come back from take_finished.

        NOTE: trace: a failed forward is not a step. The step recorded is the retried one,
        with the rows that ran; the aborted requests' records carry the error."""
        done = abort_failed(batch, errors, self.mem, self.results, now)
        keep = [i for i, r in enumerate(batch.reqs) if not r.finished()]
        if len(keep) < len(batch):
            keep_rows(batch, keep)
            self.batch_is_full = False  # NOTE: as the filter that drops finished requests does
        self._after_result(done)

    def _launch(self, step: LaunchedStep) -> None:
        """Keep `step` (overlap) for processing after the next batch is scheduled."""
        # NOTE: built whole (a namedtuple's _replace costs several times more)
        times = StepTimes(step.times.start, step.times.end, len(self.waiting_queue),
                          self.mem.kv_used())
        self.pending = LaunchedStep(step.batch.copy_for_result(), step.output, step.ids, times,
                                    step.finished, step.quiet, step.mark)

    def _process_pending(self, inflight: ScheduleBatch | None) -> None:
        step, self.pending = self.pending, None
        self._process(step, inflight)

    def _process(self, step: LaunchedStep, inflight: ScheduleBatch | None = None) -> None:
        # NOTE: rows are discarded only if a request finished or was retracted since the
        # step was scheduled (overlap), which moves the finish count
        self._after_result(self.results.process(
            step, discard=self.finish_count != step.mark, aborts_pending=bool(self.pending_aborts),
            chunked_req=self.chunked_req, inflight=inflight))

    def _after_result(self, done: list[Req]) -> None:
        # NOTE: as in SGLang, a finish does not clear batch_is_full by itself: the filter
        # that drops the finished requests does (_merge_last_batch, _update_running_batch).
        if done:
            self._finished_since_filter = True
            self.finish_count += len(done)
            self._forget(done)
            if self.chunked_req is not None and self.chunked_req.finished():
                self.chunked_req = None  # aborted between two chunks

    def _forget(self, done: list[Req]) -> None:
        """Requests that finished: no longer served, returned by take_finished."""
        for req in done:
            self.reqs.pop(req.rid, None)
            self.pending_aborts.discard(req.rid)
        self._finished += done

    # --- decode runs (shared.loop.decode_run) -----------------------------------------------

    def decode_run_limit(self, max_steps: int) -> DecodeRunLimit:
        """Decode steps, the one just scheduled first, that can be applied in bulk."""
        batch = self.running_batch
        steady = (self.last_batch is batch and batch.forward_mode.is_decode()
                  and not self.pending_aborts and not self._finished_since_filter
                  and self.chunked_req is None and (self.batch_is_full or not self.waiting_queue))
        return decode_run_limit(batch, self.mem, steady, max_steps, self.config.overlap)

    def decode_run_steps_before_finish(self, tokens, length_limit_step: int) -> int:
        """Leading steps of `tokens` [k, B] in which no request can finish
        (`length_limit_step` from decode_run_limit)."""
        return self.decode_runs.steps_before_finish(self.running_batch, tokens, length_limit_step)

    def apply_decode_run(self, tokens, starts: list[float], graph: bool, padded_batch_size: int,
                         finish_step: int | None = None) -> list[Req]:
        """Apply len(tokens) decode steps at once, exactly as that many single steps; step
        `finish_step` may finish requests: the last step, or under overlap the last or the
        one before. Under overlap the last step stays launched, its result processed by the
        next get_next_batch_to_run, as a single step's would be. Returns take_finished()."""
        k, overlap, batch = len(tokens), self.config.overlap, self.running_batch
        price = RunPrice(starts, graph, padded_batch_size)
        # NOTE: quiet: the last step can finish no request (steps_before_finish) and none is
        # pending; rows it must discard (a later retraction) are found through its mark
        quiet = finish_step is None and not self.pending_aborts and not self._finished_since_filter
        # NOTE: a run's later steps are scheduled here, before step finish_step's result is
        # processed; its first by get_next_batch_to_run
        mark = self._mark if k == 1 else self.finish_count
        end = (RunEnd(pend_last=True, finish_before_last=finish_step == k - 2) if overlap
               else RunEnd(finish_last=finish_step is not None))
        self._after_result(self.decode_runs.apply(batch, tokens, price, end, len(self.waiting_queue),
                                                  bool(self.pending_aborts)))
        for _ in range(k - 1):
            self.new_token_ratio.on_decode()
        self.step_start = starts[k - 1]
        if overlap:
            out = RunnerOutput(recorded_decode_rows(len(batch)), (len(batch), 0), graph=graph,
                               padded_batch_size=padded_batch_size)
            times = StepTimes(starts[k - 1], starts[k], len(self.waiting_queue), None)
            self._launch(LaunchedStep(batch, out, batch.output_ids, times, {}, quiet, mark))
        return self.take_finished()

    def _merge_last_batch(self) -> None:
        """SGLang's get_next_batch_to_run head: stash the chunked request, then filter the
        last extend batch and merge it into the running batch. The running batch itself is
        filtered only when it decodes (requests finished in the last decode still count in
        the next admission, as in SGLang)."""
        chunked = self.chunked_req
        if chunked is not None:
            self.mem.tree_cache.cache_unfinished_req(chunked)
        last = self.last_batch
        if last is None or not last.forward_mode.is_extend():
            return
        before = len(last)
        last.filter_batch(chunked_req_to_exclude=chunked)
        if len(last) < before:
            self.batch_is_full = False
        if last.is_empty():
            return
        if self.running_batch is None or self.running_batch.is_empty():
            self.running_batch = last
        else:
            self.running_batch.merge_batch(last)

    def _num_allocatable_reqs(self) -> int:
        running = len(self.running_batch) if self.running_batch else 0
        return min(self.config.max_running_requests - running,
                   self.mem.req_to_token_pool.available_size())

    def _get_new_batch_prefill(self) -> ScheduleBatch | None:
        if (self.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None
        if self._num_allocatable_reqs() <= 0 and self.chunked_req is None:
            self.batch_is_full = True
            return None
        held = self.chunked_req
        admission = self.admission.admit(self.waiting_queue, self.running_batch, held,
                                         self.new_token_ratio.value, self._num_allocatable_reqs())
        self.chunked_req = admission.chunked_req
        self.batch_is_full = self.batch_is_full or admission.full
        if not admission.adder.can_run_list:
            return None
        return self._build_prefill_batch(admission.adder, held)

    def _build_prefill_batch(self, adder: PrefillAdder, held: Req | None) -> ScheduleBatch:
        admitted = adder.can_run_list
        from_queue = admitted[1:] if admitted and admitted[0] is held else admitted
        self.waiting_queue = _without_admitted(self.waiting_queue, from_queue)
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None, "at most one chunked request"
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None and self.chunked_req in adder.can_run_list:
            self.chunked_req.is_chunked += 1
        batch = ScheduleBatch(adder.can_run_list, self.mem, self.model_info.vocab_size,
                              chunked_req=self.chunked_req)
        batch.prepare_for_extend()
        self._maybe_mix(batch)
        return batch

    def _maybe_mix(self, batch: ScheduleBatch) -> None:
        running = self.running_batch
        if (not self.config.enable_mixed_chunk or running is None or running.is_empty()
                or batch.return_logprob or running.return_logprob):
            return
        running.filter_batch()
        if running.is_empty() or not running.check_decode_mem():
            return  # NOTE: the admission reserved the decodes' slots; never short here
        running.prepare_for_decode()
        batch.mix_with_running(running)
        self.running_batch = None

    def _update_running_batch(self, batch: ScheduleBatch) -> ScheduleBatch | None:
        initial = len(batch)
        if self._finished_since_filter:  # NOTE: every finish sets it; nothing to drop else
            batch.filter_batch()
            self._finished_since_filter = False
        if batch.is_empty():
            self.batch_is_full = False
            return None
        if not batch.check_decode_mem():
            # NOTE: a chunked request here found no room for its next chunk this round
            retract = batch.retract_decode(held=self.chunked_req)
            if self.chunked_req is not None and self.chunked_req.is_retracted:
                self.chunked_req = None
            self.waiting_queue.extend(retract.retracted)
            self.finish_count += len(retract.retracted) + len(retract.aborted)
            for req in retract.aborted:
                self.results.record_finished(req, self.step_start)
            self._forget(retract.aborted)
            self.new_token_ratio.on_retract(sum(len(r.output_ids) for r in batch.reqs),
                                            sum(int(m) for m in batch.max_new_tokens), len(batch))
        else:
            self.new_token_ratio.on_decode()
        if len(batch) < initial:
            self.batch_is_full = False
        if batch.is_empty():
            return None
        batch.prepare_for_decode()
        return batch

    def _on_idle(self) -> None:
        self.mem.check_idle()
        self.new_token_ratio.on_idle()
        self.batch_is_full = False


def _without_admitted(queue: list[Req], admitted: list[Req]) -> list[Req]:
    """The waiting queue without `admitted` (requests taken from it), in O(admitted).
    NOTE: a round takes the queue's head in order (`PrefillAdmission` stops at the first
    request that does not fit), so the admitted requests are the queue's first k; any other
    shape falls back to filtering the whole queue."""
    k = len(admitted)
    if k <= len(queue) and all(a is b for a, b in zip(admitted, queue[:k], strict=True)):
        return queue[k:]
    taken = set(map(id, admitted))
    return [r for r in queue if id(r) not in taken]
