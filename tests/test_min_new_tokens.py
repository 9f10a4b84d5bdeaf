"""min_new_tokens and stop_token_ids in both executors and the simulated server: no request
ends with a stop id or EOS before min_new_tokens outputs (SGLang's min_new_tokens penalizer
masks them, the first token included), and a stop id at or after it ends the request at
that token (semantics §11.3)."""

import itertools
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import EngineConfig, ModelInfo, SamplingParams, Scheduler, Workload
from shared.online.serving_loop import ServingLoop
from shared.workload.length_dist import Fixed, Uniform
from shared.workload.workload import WorkloadRequest
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.build import build_simulation
from sim.run.driver import drive_workload
from sim.run.online_sim import SimStepper
from sim.run.output_lengths import OutputLengths
from sim.run.sim_model_runner import SimModelRunner
from sim.run.simulate import simulate
from sim.run.token_source import SyntheticTokenSource
from tests.strategies import stop_params, stop_token_cases

VOCAB = 12  # token 0 is EOS; stop ids cover up to all but one of the others
MODEL = ModelInfo(vocab_size=VOCAB, eos_token_ids=(0,), context_length=4096)
CLOCK = RooflineCostModel(get_model_shape("smollm2-135m"), get_hardware("h100"))
TINY_SIM_MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "max_position_embeddings": 256, "eos_token_id": 0, "torch_dtype": "float32"}


def assert_stops_honoured(output_ids, reason, params: SamplingParams, eos_ids) -> None:
    """No stop id or EOS among the first min_new_tokens outputs; the first one after them
    ends the request with it (unless ignore_eos; as max_new_tokens'th token, the length
    limit is checked first), without one the request ran to its max_new_tokens."""
    stops = set(eos_ids) | set(params.stop_token_ids or ())
    first = next((i for i, t in enumerate(output_ids) if t in stops), None)
    assert first is None or first >= params.min_new_tokens, (output_ids, params)
    if first is not None and not params.ignore_eos:
        assert len(output_ids) == first + 1, (output_ids, reason)
        assert (reason.type, reason.matched) == ("stop", output_ids[first]) \
            or (reason.type == "length" and first + 1 == params.max_new_tokens), (output_ids, reason)
    else:
        assert (reason.type, len(output_ids)) == ("length", params.max_new_tokens), (output_ids, reason)


# --- the simulator ------------------------------------------------------------------------

def test_a_simulated_request_draws_no_stop_id_before_min_new_tokens():
    """Stop ids covering 40% of the vocabulary and min_new_tokens=64: the synthetic tokens
    hold none of them before output 64 (on 022fa53 one ended the request within a few)."""
    params = SamplingParams(max_new_tokens=100, min_new_tokens=64,
                            stop_token_ids=list(range(1, 20000)))
    workload = Workload((WorkloadRequest("r0", 0.0, tuple(range(1, 20)), params),))
    rec = simulate(workload, model="smollm2-135m", hardware="h100", keep_trace=True).trace.requests["r0"]
    assert_stops_honoured(rec.output_ids, rec.finish_reason, params, (0,))
    assert rec.finish_reason.type == "stop" and rec.output_len > 64


def _simulate(config: dict, requests, runs: bool):
    scheduler = Scheduler(EngineConfig(**config), MODEL)
    source = SyntheticTokenSource(3, VOCAB, MODEL.eos_token_ids)
    runner = SimModelRunner(CLOCK, source, scheduler.config, MODEL)
    drive_workload(scheduler, runner, requests, finished_hook=source.finished, decode_runs=runs)
    return scheduler.trace


@settings(max_examples=max(200, settings.default.max_examples))
@given(case=stop_token_cases(VOCAB))
def test_no_simulated_request_stops_before_min_new_tokens_and_a_later_stop_id_ends_it(case):
    """Over any schedule (chunking, retraction, paging, both schedules), with decode runs
    and step by step alike (the same run: the runs' looked-ahead tokens are the drawn
    ones): stop ids and EOS are masked until min_new_tokens, and the first after ends the
    request."""
    config, reqs = case
    workload = Workload(tuple(WorkloadRequest(f"r{i}", arrival, tuple(prompt), SamplingParams(**p))
                              for i, (prompt, p, arrival) in enumerate(reqs)))
    trace = _simulate(config, workload, runs=True)
    for rec in trace.requests.values():
        assert_stops_honoured(rec.output_ids, rec.finish_reason, rec.sampling_params, (0,))
    assert _simulate(config, workload, runs=False).requests == trace.requests


# --- the simulated server (sim.run.online_sim) with drawn answer lengths ------------------------

class Answers:
    """Each request's streamed tokens and finish reason; `wait` for all of them."""

    def __init__(self, n: int) -> None:
        self.tokens, self.reasons, self.left = {}, {}, threading.Semaphore(0)
        self.n = n

    def listener(self, rid: str):
        self.tokens[rid] = []

        def on_event(event) -> None:
            self.tokens[rid] += event.token_ids
            if event.finish is not None:
                self.reasons[rid] = event.finish
                self.left.release()
        return on_event

    def wait(self) -> None:
        for _ in range(self.n):
            assert self.left.acquire(timeout=60)


def _serve(engine: ServingLoop, requests) -> Answers:
    """Submit (rid, prompt, params) to a started engine and wait for every answer."""
    answers = Answers(len(requests))
    for rid, prompt, params in requests:
        engine.submit(rid, prompt, params, answers.listener(rid))
    answers.wait()
    return answers


def _server(lengths: OutputLengths, model="smollm2-135m") -> ServingLoop:
    # NOTE: 1e6 simulated seconds a wall second: a step's price is no wait; a small KV pool
    # (a tiny model's on an H100 would take seconds to build)
    s = build_simulation(model=model, hardware="h100", max_total_tokens=4096)
    return ServingLoop(SimStepper(s, "m", 1e6, output_lengths=lengths))


def test_a_drawn_answer_length_never_ends_a_request_before_min_new_tokens():
    """--output-len-median's drawn lengths: a request with min_new_tokens=10 whose drawn
    length is 3 gets its EOS as token 11 (on 022fa53 after 3)."""
    engine = _server(OutputLengths(Fixed(3), eos_token_id=0))
    params = SamplingParams(max_new_tokens=20, min_new_tokens=10)
    engine.start()
    try:
        answers = _serve(engine, [("a", [5, 6, 7], params)])
    finally:
        engine.stop()
    assert len(answers.tokens["a"]) == 11 and answers.reasons["a"].matched == 0


@pytest.fixture(scope="module")
def tiny_server():
    """A started simulated server over a 12-token vocabulary, answers of 1-8 tokens, and a
    fresh rid per call."""
    engine = _server(OutputLengths(Uniform(1, 8), eos_token_id=0, seed=5), TINY_SIM_MODEL)
    engine.start()
    yield engine, itertools.count()
    engine.stop()


@settings(max_examples=max(200, settings.default.max_examples))
@given(max_new=st.lists(st.integers(1, 12), min_size=1, max_size=4), data=st.data())
def test_no_simulated_server_answer_ends_before_min_new_tokens(tiny_server, max_new, data):
    """The simulated server's answers, ended by drawn lengths (EOS), stop ids or
    max_new_tokens, hold no stop id or EOS before min_new_tokens, and end at the first
    after."""
    engine, ids = tiny_server
    requests = [(f"q{next(ids)}", [1 + i, 2, 3], SamplingParams(**data.draw(stop_params(VOCAB, m))))
                for i, m in enumerate(max_new)]
    answers = _serve(engine, requests)
    for rid, _, params in requests:
        assert_stops_honoured(answers.tokens[rid], answers.reasons[rid], params, (0,))


# --- the real executor --------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_engine(tiny_checkpoint):
    pytest.importorskip("torch")
    from exec.engine.engine import Engine

    return Engine(tiny_checkpoint("llama")[0], max_total_tokens=1024)


@settings(max_examples=max(200, settings.default.max_examples))
@given(max_new=st.lists(st.integers(1, 8), min_size=1, max_size=3), data=st.data())
def test_no_generated_request_stops_before_min_new_tokens_and_a_later_stop_id_ends_it(
        tiny_engine, max_new, data):
    """exec's sampler masks EOS and stop ids until min_new_tokens, greedy or sampled, and
    the first stop id after ends the request with it."""
    params = [SamplingParams(**data.draw(stop_params(256, m))) for m in max_new]
    prompts = [[7 + i, 40, 9] for i in range(len(params))]
    for out, p in zip(tiny_engine.generate(prompts, params), params, strict=True):
        assert_stops_honoured(out.token_ids, out.finish_reason, p, (0,))
