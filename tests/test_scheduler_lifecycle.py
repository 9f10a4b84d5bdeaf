"""Scheduler request lifecycles: bad input, aborts, stop conditions, retraction, leaks."""

import numpy as np
import pytest

from shared import FinishReason, ForwardBatch, InvalidRequestError, MemoryLeakError, SamplingParams
from shared.batch.schedule_batch import RETRACT_OOM_MESSAGE, ScheduleBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.req import Req
from tests.scripted_runner import ScriptedRunner, default_token, drive

MODEL = ModelInfo(vocab_size=50, eos_token_ids=(0,), context_length=8192)


def _sched(**kw):
    """A scheduler without the overlap schedule (each step's result is processed at once)
    unless `disable_overlap_schedule=False` is passed: these tests pin exact steps."""
    kw.setdefault("max_total_tokens", 512)
    kw.setdefault("disable_overlap_schedule", True)
    return Scheduler(EngineConfig(disable_cuda_graph=True, **kw), MODEL)


def _req(rid, n=8, max_new=4, **params):
    return Req(rid, [1 + (i % 9) for i in range(n)], SamplingParams(max_new_tokens=max_new, **params))


def _step(sched, runner, now=0.0, finished=None):
    batch = sched.get_next_batch_to_run(now)
    if batch is None:
        return None
    fb = ForwardBatch.init_new(batch)
    out = runner.forward(fb)
    return sched.process_batch_result(batch, out, runner.sample(out, fb), now + 0.01, finished)


def test_invalid_request_is_refused_and_the_rest_keep_serving():
    """A bad request raises InvalidRequestError, queues nothing, and others finish."""
    sched = _sched()
    good = _req("good", ignore_eos=True)
    sched.add_request(good)
    with pytest.raises(InvalidRequestError) as e:
        sched.add_request(Req("bad", [1, 2, 99], SamplingParams()))
    assert e.value.field == "input_ids"
    with pytest.raises(InvalidRequestError, match="already submitted"):
        sched.add_request(_req("good"))
    drive(sched, ScriptedRunner(MODEL.vocab_size), [])
    assert sched.trace.requests["good"].output_len == 4
    assert "bad" not in sched.trace.requests


def test_abort_waiting_request_finishes_it_without_kv():
    """Aborting a queued request ends it at once with an abort reason."""
    sched = _sched()
    sched.add_request(_req("a", ignore_eos=True))
    assert sched.abort("a", "client went away")
    assert sched.trace.requests["a"].finish_reason == FinishReason.by_abort("client went away")
    assert not sched.abort("a") and not sched.abort("nobody")
    assert sched.get_next_batch_to_run(0.0) is None  # idle check passes


def test_abort_running_request_ends_it_at_its_next_token():
    """A running request aborted between steps finishes at the next result, KV released."""
    sched, runner = _sched(), ScriptedRunner(MODEL.vocab_size)
    for rid in ("a", "b"):
        sched.add_request(_req(rid, max_new=10, ignore_eos=True))
    _step(sched, runner)
    sched.abort("a")
    done = _step(sched, runner)
    assert [r.rid for r in done] == ["a"]
    assert sched.trace.requests["a"].finish_reason.type == "abort"
    drive(sched, runner, [])
    assert sched.trace.requests["b"].output_len == 10


def test_abort_chunked_request_mid_prefill_leaks_nothing():
    """A request aborted between its prefill chunks ends after the chunk in flight."""
    sched, runner = _sched(chunked_prefill_size=16), ScriptedRunner(MODEL.vocab_size)
    sched.add_request(_req("long", n=60, ignore_eos=True))
    _step(sched, runner)
    assert sched.chunked_req is not None
    sched.abort("long")
    drive(sched, runner, [])
    assert sched.trace.requests["long"].finish_reason.type == "abort"
    assert sched.trace.requests["long"].output_len == 0


def test_eos_and_stop_token_ids_finish_unless_ignore_eos():
    """EOS and a request's stop_token_ids end it with a stop reason; ignore_eos does not."""
    script = {"eos": [5, 0], "stop": [5, 7], "ignored": [0, 0, 0]}
    runner = ScriptedRunner(MODEL.vocab_size, script=lambda rid, i: script[rid][i])
    sched = _sched()
    reqs = [_req("eos", max_new=5), _req("stop", max_new=5, stop_token_ids=[7]),
            _req("ignored", max_new=3, ignore_eos=True)]
    drive(sched, runner, reqs)
    recs = sched.trace.requests
    assert (recs["eos"].finish_reason, recs["eos"].output_len) == (FinishReason.by_stop(0), 2)
    assert (recs["stop"].finish_reason, recs["stop"].output_len) == (FinishReason.by_stop(7), 2)
    assert recs["ignored"].finish_reason.type == "length"


def test_caller_finishes_a_request_after_its_token():
    """`finished` (e.g. a stop string the executor saw) ends the request after this token."""
    sched, runner = _sched(), ScriptedRunner(MODEL.vocab_size)
    sched.add_request(_req("a", max_new=10, ignore_eos=True))
    done = _step(sched, runner, finished={"a": FinishReason.by_stop("\n\n")})
    assert [r.rid for r in done] == ["a"]
    assert sched.trace.requests["a"].output_len == 1
    assert sched.get_next_batch_to_run(1.0) is None


def test_retraction_takes_fewest_outputs_first_and_loses_no_token(monkeypatch):
    """Under KV pressure the retracted requests are those with the fewest outputs (ties:
    the longer prompt), and every request still ends with exactly its tokens."""
    seen = []
    original = ScheduleBatch.retract_decode

    def spy(batch, held=None):
        before = [(len(r.output_ids), -len(r.origin_input_ids), r.rid) for r in batch.reqs]
        result = original(batch, held)
        seen.append((before, [r.rid for r in result.retracted if r is not held]))
        return result

    monkeypatch.setattr(ScheduleBatch, "retract_decode", spy)
    sched = _sched(max_total_tokens=96, schedule_conservativeness=0.02)
    reqs = [_req(f"r{i}", n=6 + i % 3, max_new=30, ignore_eos=True) for i in range(6)]
    for i, r in enumerate(reqs):
        r.arrival_time = 0.03 * i
    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs)
    assert seen, "the workload was meant to force a retraction"
    for before, retracted in seen:
        order = [rid for *_, rid in sorted(before)]
        assert retracted == order[: len(retracted)]
    for r in reqs:
        assert sched.trace.requests[r.rid].output_ids == tuple(
            default_token(r.rid, k, MODEL.vocab_size) for k in range(30))


def test_lone_request_that_cannot_fit_is_aborted_not_crashed():
    """A single request whose output outgrows the KV pool is aborted with a clear message."""
    sched = _sched(max_total_tokens=4200)
    drive(sched, ScriptedRunner(MODEL.vocab_size), [_req("huge", n=100, max_new=5000, ignore_eos=True)])
    rec = sched.trace.requests["huge"]
    assert rec.finish_reason == FinishReason.by_abort(RETRACT_OOM_MESSAGE)
    assert 4000 < rec.output_len < 4200


def test_idle_check_catches_a_leaked_slot():
    """A KV slot owned by nobody at idle raises MemoryLeakError."""
    sched = _sched()
    drive(sched, ScriptedRunner(MODEL.vocab_size), [_req("a", ignore_eos=True)])
    sched.mem.allocator.alloc(1)
    with pytest.raises(MemoryLeakError, match="leak detected"):
        sched.get_next_batch_to_run(5.0)


def test_clock_values_never_change_decisions():
    """The same requests give the same steps whatever the step duration."""
    def run(step_time):
        sched = _sched(chunked_prefill_size=16, enable_mixed_chunk=True)
        drive(sched, ScriptedRunner(MODEL.vocab_size),
              [_req(f"r{i}", n=20 + i, max_new=6, ignore_eos=True) for i in range(5)], step_time)
        return sched.trace.steps
    fast, slow = run(0.001), run(3.0)
    assert [a.diff(b) for a, b in zip(fast, slow, strict=True)] == [None] * len(fast)
    assert np.isclose(slow[-1].duration, 3.0)


def test_retraction_evicts_for_the_requests_left_after_each_pop():
    """SGLang's release_req(idx, remaining_req_count) asks the cache for RETRACT_DECODE_STEPS
    tokens per request still in the batch after that pop: 3 * 20, then 2 * 20 (not the
    batch size before the pops each time)."""
    from shared.memory.kv_memory import KVMemory

    mem = KVMemory.build(max_running_requests=4, max_context_len=64, max_total_tokens=64,
                         page_size=16, disable_radix_cache=True)
    reqs = [_req(f"r{i}", n=16, max_new=8, ignore_eos=True) for i in range(4)]
    for r in reqs:
        r.init_next_round_input(mem.tree_cache)
    batch = ScheduleBatch(reqs, mem, MODEL.vocab_size)
    batch.prepare_for_extend()           # four full pages: the pool is full, every decode opens a page
    asked = []
    evict = mem.tree_cache.evict
    mem.tree_cache.evict = lambda n: asked.append(n) or evict(n)
    result = batch.retract_decode()
    assert [r.rid for r in result.retracted] == ["r3", "r2"] and not result.aborted
    assert [n for n in asked if n % 20 == 0 and n % 16] == [60, 40]
    assert batch.check_decode_mem()


def test_a_full_batch_admits_again_only_after_the_decode_filter():
    """SGLang clears batch_is_full in update_running_batch, once the decode filter dropped a
    finished request: with max_running_requests=2, "c" waits through the decode that
    follows "a"'s finish and is admitted one step later."""
    sched = _sched(max_running_requests=2)
    reqs = [_req("a", max_new=2, ignore_eos=True), _req("b", max_new=10, ignore_eos=True),
            _req("c", max_new=2, ignore_eos=True)]
    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs)
    steps = [(s.forward_mode, s.rids) for s in sched.trace.steps[:4]]
    assert steps == [("EXTEND", ("a", "b")), ("DECODE", ("a", "b")), ("DECODE", ("b",)),
                     ("EXTEND", ("c",))]


def test_a_batch_emptied_by_the_decode_filter_admits_in_the_same_call():
    """When the filter empties the running batch of a full engine, the waiting request is
    admitted at once (SGLang's next loop turn, with no forward in between), not stalled."""
    sched = _sched(max_running_requests=1)
    reqs = [_req("a", max_new=2, ignore_eos=True), _req("c", max_new=2, ignore_eos=True)]
    drive(sched, ScriptedRunner(MODEL.vocab_size), reqs)
    assert [(s.forward_mode, s.rids) for s in sched.trace.steps] == [
        ("EXTEND", ("a",)), ("DECODE", ("a",)), ("EXTEND", ("c",)), ("DECODE", ("c",))]
