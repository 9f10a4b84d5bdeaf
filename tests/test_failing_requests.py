"""Bad input never poisons the engine: a request whose forward or sampling raises is
aborted alone with the error, an abandoned stream or an abort frees what its request held,
and the rest of the engine serves on, leak-free, under both schedules."""

import gc

import pytest

from exec.engine.engine import Engine
from shared import ForwardBatch, SamplingParams, Scheduler
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.request.req import Req
from shared.workload.workload import Workload, WorkloadRequest
from tests.engine_checks import assert_idle_and_leak_free
from tests.scripted_runner import ScriptedRunner

POISON_SEED = 424_242  # the marker: a request with this sampling_seed makes the runner raise
ERROR = "poisoned logit bias"
GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
POISONED = {**GREEDY, "sampling_seed": POISON_SEED}
GOOD, BAD, THIRD = [5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]
LONG = [1 + i % 97 for i in range(40)]
SCHEDULES = pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])


@pytest.fixture(scope="module")
def folder(tiny_checkpoint):
    return tiny_checkpoint("llama")[0]


@pytest.fixture(scope="module")
def alone(folder):
    """prompt (tuple) -> the greedy tokens it gets alone on a fresh engine."""
    engine = Engine(folder, max_total_tokens=512)
    return {tuple(p): engine.generate(p, GREEDY).token_ids for p in (GOOD, THIRD, LONG)}


def _engine(folder, overlap, **kw):
    return Engine(folder, max_total_tokens=512, disable_overlap_schedule=not overlap, **kw)


def _poison(monkeypatch, engine, where="sample", after=0):
    """Make runner.`where` raise ValueError(ERROR) for a batch holding a request seeded
    POISON_SEED that has at least `after` outputs (a per-request failure, as a bad logit
    bias would be). Returns a list of (rids, the chunked request's rid) of each batch it
    raised for."""
    original, raised = getattr(engine.runner, where), []

    def failing(*args):
        fb = args[-1]
        for seed, out in zip(fb.sampling_seeds.tolist(), fb.output_ids, strict=True):
            if seed == POISON_SEED and len(out) >= after:
                chunked = engine.scheduler.chunked_req
                raised.append((fb.rids, chunked and chunked.rid))
                raise ValueError(ERROR)
        return original(*args)

    monkeypatch.setattr(engine.runner, where, failing)
    return raised


def _aborted_with(reason, text):
    return reason is not None and reason.type == "abort" and text in reason.message


@SCHEDULES
@pytest.mark.parametrize("where", ["forward", "sample"])
@pytest.mark.parametrize("after", [0, 2], ids=["at-prefill", "at-decode"])
def test_a_failing_request_is_aborted_alone_and_the_others_get_their_tokens(
        folder, alone, monkeypatch, overlap, where, after):
    """One good and one failing request in a call, then a third good call: the failing one
    ends aborted naming the error, the good ones get their tokens alone, nothing leaks."""
    engine = _engine(folder, overlap)
    _poison(monkeypatch, engine, where, after)
    good, bad = engine.generate([GOOD, BAD], [GREEDY, POISONED])
    assert _aborted_with(bad.finish_reason, ERROR)
    assert len(bad.token_ids) == after
    assert good.token_ids == alone[tuple(GOOD)]
    assert engine.generate(THIRD, GREEDY).token_ids == alone[tuple(THIRD)]
    assert_idle_and_leak_free(engine)


@SCHEDULES
def test_a_request_failing_in_a_chunked_or_mixed_batch_is_aborted_alone(folder, alone, monkeypatch,
                                                                         overlap):
    """A failing decode row of a MIXED batch (beside a chunked prefill), and a chunked request
    failing mid-prefill, are aborted alone; the other request gets its tokens."""
    engine = _engine(folder, overlap, chunked_prefill_size=16, enable_mixed_chunk=True)
    _poison(monkeypatch, engine, "forward", after=2)
    bad, good = engine.generate([BAD, LONG], [POISONED, GREEDY])
    assert any(s.forward_mode == "MIXED" and len(s.rids) == 2 for s in engine.trace.steps)
    assert _aborted_with(bad.finish_reason, ERROR) and good.token_ids == alone[tuple(LONG)]
    raised = _poison(monkeypatch, engine, "forward", after=0)
    long_rid = f"req-{len(engine.trace.requests)}"
    bad, good = engine.generate([[2 + i % 89 for i in range(40)], GOOD], [POISONED, GREEDY])
    assert raised == [((long_rid,), long_rid)]  # its first chunk, alone in the batch
    assert _aborted_with(bad.finish_reason, ERROR) and bad.token_ids == []
    assert good.token_ids == alone[tuple(GOOD)] and engine.scheduler.chunked_req is None
    assert_idle_and_leak_free(engine)


@SCHEDULES
def test_a_step_that_fails_for_every_subset_aborts_every_request_in_it(folder, alone, monkeypatch,
                                                                        overlap):
    """A forward that raises whatever it runs aborts each request of its batch with the
    error; once it works again the engine serves as before, leak-free."""
    engine = _engine(folder, overlap)
    forward, broken = engine.runner.forward, [True]

    def failing(fb):
        if broken[0]:
            raise RuntimeError("device lost")
        return forward(fb)

    monkeypatch.setattr(engine.runner, "forward", failing)
    outs = engine.generate([GOOD, BAD, THIRD], GREEDY)
    assert all(_aborted_with(o.finish_reason, "device lost") for o in outs)
    broken[0] = False
    assert engine.generate(GOOD, GREEDY).token_ids == alone[tuple(GOOD)]
    assert_idle_and_leak_free(engine)


def test_a_scheduler_error_beside_a_failing_forward_is_raised_not_blamed_on_requests(folder, monkeypatch):
    """When the overlapped processing of the last result raises (a scheduler bug) while the
    forward raises too, generate raises the scheduler's error: only the runner's errors
    become aborts."""
    engine = _engine(folder, True)
    forward, process_last, calls = engine.runner.forward, engine.scheduler.process_last, []

    def failing_forward(fb):
        calls.append(1)
        if len(calls) > 1:
            raise ValueError(ERROR)
        return forward(fb)

    def failing_processing(inflight):
        if inflight is not None:
            raise KeyError("scheduler bug")
        return process_last(inflight)

    monkeypatch.setattr(engine.runner, "forward", failing_forward)
    monkeypatch.setattr(engine.scheduler, "process_last", failing_processing)
    with pytest.raises(KeyError, match="scheduler bug"):
        engine.generate([GOOD, BAD], GREEDY)


@SCHEDULES
def test_a_poisoned_request_aborted_by_id_before_its_next_step_does_not_raise(folder, alone,
                                                                              monkeypatch, overlap):
    """Aborting the request that would fail in its next step: that step does not raise,
    the request ends with the client's abort, the other one runs to its end, no leak."""
    engine = _engine(folder, overlap)
    _poison(monkeypatch, engine, "sample", after=1)
    good, bad = engine.make_requests([GOOD, BAD], [SamplingParams(**GREEDY), SamplingParams(**POISONED)])
    for r in (good, bad):
        engine.scheduler.add_request(r)
    assert engine.step() is not None
    assert engine.abort(bad.rid)
    while engine.step() is not None:
        pass
    assert bad.finished_reason.type == "abort" and bad.finished_reason.message == "aborted by the client"
    assert good.output_ids == alone[tuple(GOOD)]
    for r in (good, bad):
        engine.forget(r)
    assert_idle_and_leak_free(engine)


@SCHEDULES
@pytest.mark.parametrize("how", ["close", "del", "break", "unstarted"])
def test_a_dropped_stream_aborts_its_requests_and_frees_their_kv(folder, alone, overlap, how):
    """A stream closed, dropped (and collected) or left by a break after its first chunk, or
    dropped unstarted, aborts its requests at once: rows and KV are free, the engine serves on."""
    engine = _engine(folder, overlap)
    stream = engine.generate([GOOD, BAD], GREEDY, stream=True)
    if how == "unstarted":
        del stream
        gc.collect()
    elif how == "break":
        for _chunk in stream:
            break
        del stream
    else:
        next(stream)
        if how == "close":
            stream.close()
        else:
            del stream
            gc.collect()
    records = engine.trace.requests.values()
    assert [r.finish_reason.type for r in records] == ["abort", "abort"]
    assert_idle_and_leak_free(engine)
    assert engine.generate(THIRD, GREEDY).token_ids == alone[tuple(THIRD)]
    assert_idle_and_leak_free(engine)


@SCHEDULES
def test_a_stream_dropped_during_a_step_is_aborted_at_the_next_step(folder, alone, monkeypatch, overlap):
    """A stream closed from inside a step (as a garbage collection there would, maybe on the
    forward thread) is not stepped there: its requests are aborted at the next step, and
    once the engine is idle nothing leaks."""
    engine = _engine(folder, overlap)
    stream = engine.generate([GOOD, BAD], GREEDY, stream=True)
    next(stream)
    forward, closed = engine.runner.forward, []

    def closing(fb):
        if not closed:
            closed.append(stream.close())
        return forward(fb)

    monkeypatch.setattr(engine.runner, "forward", closing)
    assert engine.generate(THIRD, GREEDY).token_ids == alone[tuple(THIRD)]
    assert closed and [r.finish_reason.type for r in list(engine.trace.requests.values())[:2]] == ["abort"] * 2
    assert_idle_and_leak_free(engine)


STATES = {  # state -> (steps to reach it, chunked prefill, what abort returns)
    "waiting": (0, False, True), "chunked": (1, True, True), "running": (3, False, True),
    "pending": (1, False, True), "finished": (None, False, False),
}


@SCHEDULES
@pytest.mark.parametrize("state", list(STATES))
def test_abort_in_any_state_frees_the_request_at_once_and_leaks_nothing(folder, alone, overlap, state):
    """Engine.abort of a waiting, chunked, running, pending (overlap) or finished request
    returns whether it was live, and the request holds no row or KV when it returns."""
    steps, chunked, live = STATES[state]
    engine = _engine(folder, overlap, chunked_prefill_size=16)
    sched = engine.scheduler
    target, other = engine.make_requests([LONG if chunked else BAD, GOOD], [SamplingParams(**GREEDY)] * 2)
    for r in (target, other):
        sched.add_request(r)
    if steps is None:
        while not target.finished():
            engine.step()
    for _ in range(steps or 0):
        engine.step()
    if state == "chunked":
        assert sched.chunked_req is target
    if state == "pending":
        assert (sched.pending is not None) == overlap
        assert len(target.output_ids) == (0 if overlap else 1)
    assert engine.abort(target.rid) is live
    assert target.finished() and target.req_pool_idx is None
    assert (target.finished_reason.type == "abort") is live
    assert not engine.abort(target.rid) and not engine.abort("nobody")
    while engine.step() is not None:
        pass
    assert other.output_ids == alone[tuple(GOOD)]
    for r in (target, other):
        engine.forget(r)
    assert_idle_and_leak_free(engine)


@SCHEDULES
def test_the_online_loop_survives_a_failing_request(folder, alone, monkeypatch, overlap):
    """run(workload) with a failing request: it ends aborted naming the error, the others
    complete with their tokens, and the engine is idle and leak-free."""
    engine = _engine(folder, overlap)
    _poison(monkeypatch, engine, "sample", after=1)
    prompts = {"a": (GOOD, GREEDY), "b": (BAD, POISONED), "c": (THIRD, GREEDY)}
    workload = Workload(tuple(WorkloadRequest(rid, 0.001 * i, tuple(p), SamplingParams(**sp))
                              for i, (rid, (p, sp)) in enumerate(prompts.items())))
    result = engine.run(workload)
    recs = result.trace.requests
    assert _aborted_with(recs["b"].finish_reason, ERROR)
    assert list(recs["a"].output_ids) == alone[tuple(GOOD)]
    assert list(recs["c"].output_ids) == alone[tuple(THIRD)]
    assert_idle_and_leak_free(engine)


MODEL = ModelInfo(vocab_size=50, eos_token_ids=(0,), context_length=8192)
CASES = {  # case -> (requests, the step at which they fail, its forward mode, mixed chunks)
    "decode": (("b",), 3, "DECODE", False),
    "chunked": (("long",), 1, "EXTEND", False),
    "mixed-decode-row": (("a",), 1, "MIXED", True),
    "mixed-chunked-row": (("long",), 1, "MIXED", True),
    "all": (("a", "long"), 0, "EXTEND", False),
}


@SCHEDULES
@pytest.mark.parametrize("case", list(CASES))
def test_fail_batch_aborts_the_named_requests_and_leaves_the_rest_runnable(overlap, case):
    """Scheduler.fail_batch on a scheduled batch: the named requests end aborted with their
    message and their KV released; the batch keeps the others, prepared, and once it runs
    every other request ends with exactly its scripted tokens, leak-free."""
    victims, fail_step, mode, mixed = CASES[case]
    sched = Scheduler(EngineConfig(max_total_tokens=512, disable_cuda_graph=True, chunked_prefill_size=16,
                                   enable_mixed_chunk=mixed, disable_overlap_schedule=not overlap), MODEL)
    runner = ScriptedRunner(MODEL.vocab_size)
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    reqs = [Req("a", [1, 2, 3], params), Req("long", [1 + i % 9 for i in range(40)], params)]
    reqs += [Req("b", [4, 5], params)] if case == "decode" else []
    for r in reqs:
        sched.add_request(r)
    now, k = 0.0, 0
    while (batch := sched.get_next_batch_to_run(now)) is not None:
        now, k = now + 0.01, k + 1
        if k - 1 == fail_step:
            assert batch.forward_mode.name == mode and set(victims) <= set(batch.rids)
            sched.fail_batch(batch, {v: f"{v} failed" for v in victims}, now)
            assert not set(victims) & set(batch.rids)
            if batch.is_empty():
                continue
        fb = ForwardBatch.init_new(batch)
        out = runner.forward(fb)
        sched.process_batch_result(batch, out, runner.sample(out, fb), now)
    recs = sched.trace.requests
    for r in reqs:
        if r.rid in victims:
            assert recs[r.rid].finish_reason.message == f"{r.rid} failed"
        else:
            assert list(recs[r.rid].output_ids) == [runner.script(r.rid, i) for i in range(5)]
        assert r.req_pool_idx is None
    assert sched.chunked_req is None and sched.is_idle()
    sched.mem.check_idle()
