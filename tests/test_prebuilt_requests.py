"""Requests that arrive with outputs already produced (`Scheduler.add_request`, SGLang's
PREBUILT path: a disaggregated decode server receiving the prefill's first token)."""

import math

import pytest

from shared import InvalidRequestError, SamplingParams
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.req import Req
from shared.trace.trace import Trace
from tests.scripted_runner import ScriptedRunner, default_token, drive

MODEL = ModelInfo(vocab_size=50, eos_token_ids=(0,), context_length=8192)
PROMPT = [3, 1, 4, 1, 5, 9]


def _sched(overlap: bool = True) -> Scheduler:
    return Scheduler(EngineConfig(disable_cuda_graph=True, max_total_tokens=512,
                                  disable_overlap_schedule=not overlap), MODEL)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_request_arriving_with_outputs_continues_from_them(overlap):
    """Arriving with output 0: one extend over prompt + that output samples output 1, and
    max_new_tokens counts output 0; the outputs are the request's served whole, its record
    keeps what it arrived with and has its first token at its arrival."""
    runner = ScriptedRunner(MODEL.vocab_size)
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    whole = _sched(overlap)
    drive(whole, runner, [Req("p", PROMPT, params)])
    first = default_token("p", 0, MODEL.vocab_size)
    sched = _sched(overlap)
    drive(sched, runner, [Req("p", PROMPT, params, arrival_time=0.5, output_ids=[first])])
    rec = sched.trace.requests["p"]
    assert rec.output_ids == whole.trace.requests["p"].output_ids and rec.output_len == 5
    assert rec.prebuilt_output_ids == (first,) and rec.first_token_time == 0.5
    step = sched.trace.steps[0]
    assert step.extend_seq_lens == (len(PROMPT) + 1,) and step.input_ids[-1] == first
    assert step.next_token_ids == (default_token("p", 1, MODEL.vocab_size),)


@pytest.mark.parametrize(("outputs", "params", "reason"), [
    ([7, 8], {"max_new_tokens": 2}, "leave none of max_new_tokens=2"),
    ([7, 0], {"max_new_tokens": 4}, "EOS or stop token"),
    ([7], {"max_new_tokens": 4, "stop_token_ids": [7]}, "EOS or stop token"),
    ([99], {"max_new_tokens": 4}, "outside the vocabulary"),
    ([7, "x"], {"max_new_tokens": 4}, "not an int"),
])
def test_outputs_that_end_the_request_or_are_no_tokens_are_refused(outputs, params, reason):
    """Outputs that already finish the request, or are not token ids: InvalidRequestError
    on output_ids, nothing queued."""
    sched = _sched()
    with pytest.raises(InvalidRequestError, match=reason) as e:
        sched.add_request(Req("p", PROMPT, SamplingParams(**params), output_ids=outputs))
    assert e.value.field == "output_ids"
    assert not sched.waiting_queue and "p" not in sched.trace.requests


def test_an_eos_output_is_accepted_when_eos_is_ignored():
    sched = _sched()
    sched.add_request(Req("p", PROMPT, SamplingParams(max_new_tokens=4, ignore_eos=True),
                          output_ids=[0]))
    drive(sched, ScriptedRunner(MODEL.vocab_size), [])
    assert sched.trace.requests["p"].output_len == 4


def test_a_decode_instances_trace_keeps_what_requests_arrived_with_and_replays(tmp_path):
    """A disaggregated run's decode trace, saved and read back, holds each request's first
    token as `prebuilt_output_ids` and replays step for step."""
    from shared import Workload
    from shared.workload.workload import WorkloadRequest
    from sim.fleet.disagg_layout import Disaggregated
    from sim.run.deployment import Deployment
    from sim.run.replay import replay
    from sim.run.simulate import simulate

    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    w = Workload(tuple(WorkloadRequest(f"r{i}", 0.002 * i, tuple(PROMPT), params)
                       for i in range(4)))
    r = simulate(w, Deployment("smollm2-135m", engine={"max_total_tokens": 4096}),
                 Disaggregated(kv_link_latency=0.0, kv_link_bandwidth=math.inf), keep_trace=True)
    r.run.decode_traces[0].save(tmp_path / "decode.jsonl")
    trace = Trace.load(tmp_path / "decode.jsonl")
    for rec in trace.requests.values():
        assert rec.prebuilt_output_ids == rec.output_ids[:1] and rec.output_len == 6
    assert replay(trace).agree_fraction == 1.0
