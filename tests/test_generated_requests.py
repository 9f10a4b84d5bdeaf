"""Generated workloads (`Synthetic`, `ShareGPTLike`) make their requests on access
(`shared.workload.generated_requests`): the same requests as the eager build
(`tests.eager_workloads`), element by element, and a `Workload` of them behaves as one of a
tuple: equality both ways, JSONL, len, iteration, indexing and slicing."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.scheduler import Scheduler
from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams
from shared.trace.run_log import Keep
from shared.workload.generated_requests import GeneratedRequests
from shared.workload.length_dist import LogNormal, Uniform
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.synthetic import Synthetic
from shared.workload.workload import FollowUp, Workload, WorkloadRequest
from sim.run.build import build_simulation
from sim.run.driver import check_workload
from tests.eager_workloads import eager_requests
from tests.strategies import burstinesses, length_dists, rates, vocab_sizes

templates = st.one_of(st.none(), st.just(SamplingParams(temperature=0.7, stop=("\n",),
                                                        logit_bias={3: 1.5}, stop_token_ids=[2])))
builds = st.fixed_dictionaries({"vocab_size": vocab_sizes, "seed": st.integers(0, 2**32),
                                "rate": rates, "burstiness": burstinesses})


def _fields(r: WorkloadRequest) -> tuple:
    return r.rid, r.arrival_time, r.input_ids, r.sampling_params


def _rechunked(reqs: GeneratedRequests, chunk: int) -> GeneratedRequests:
    return GeneratedRequests(reqs.arrivals, reqs.output_lens, reqs.prompts, reqs.template, chunk)


@given(st.integers(0, 40), length_dists(max_len=30), length_dists(max_len=8), templates, builds)
def test_synthetic_requests_equal_the_eager_builds(n, prompt, output, template, kw):
    """Rid, arrival, prompt ids and sampling parameters of every request are the eager
    build's, and the two workloads are equal."""
    spec = Synthetic(n, prompt, output, template)
    w, want = spec.build(**kw), eager_requests(spec, **kw)
    assert [_fields(r) for r in w.requests] == [_fields(r) for r in want]
    assert w == Workload(want, w.name, w.config) and Workload(want, w.name, w.config) == w


@settings(max_examples=20)
@given(st.integers(0, 300), st.floats(1.0, 400.0), st.floats(1.0, 100.0), st.floats(0.0, 2.0),
       st.sampled_from((64, 2048)), st.sampled_from((50, 128256)), st.integers(0, 2**16), rates)
def test_sharegpt_like_requests_equal_the_eager_builds(n, prompt, output, sigma, max_len, vocab,
                                                       seed, rate):
    spec = ShareGPTLike(n, prompt, output, sigma, max_len)
    kw = {"vocab_size": vocab, "seed": seed, "rate": rate}
    w = spec.build(**kw)
    assert list(w.requests) == list(eager_requests(spec.synthetic(), **kw))
    assert w.config["generator"] == "sharegpt_like"


@given(st.integers(1, 30), st.integers(1, 7), st.data())
def test_indexing_and_slicing_read_as_the_tuple_does(n, chunk, data):
    """Indices (negative too), slices with any step, and out-of-range indices, at any chunk
    size, give what the eager tuple gives."""
    spec = Synthetic(n, Uniform(1, 9), 3)
    reqs = _rechunked(spec.build(vocab_size=1000, seed=n, rate=4.0).requests, chunk)
    want = eager_requests(spec, vocab_size=1000, seed=n, rate=4.0)
    for i in data.draw(st.lists(st.integers(-n, n - 1), max_size=10)):
        assert reqs[i] == want[i]
    bounds = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    cut = slice(data.draw(bounds), data.draw(bounds), data.draw(st.sampled_from((None, 1, 2, -1, -3))))
    assert reqs[cut] == want[cut] and isinstance(reqs[cut], tuple)
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            reqs[bad]


def test_workload_len_iteration_and_index_read_the_generated_requests():
    spec = Synthetic(2500, LogNormal(20, 1.0, 100), Uniform(1, 30))
    w = spec.build(vocab_size=128256, seed=3, rate=50.0)
    want = eager_requests(spec, vocab_size=128256, seed=3, rate=50.0)
    assert isinstance(w.requests, GeneratedRequests) and len(w) == len(w.requests) == 2500
    assert list(w) == list(want) and w.requests[1999] == want[1999] and w.requests[-1] == want[-1]
    assert w.requests.index(want[1500]) == 1500 and want[7] in w.requests


def test_generated_workloads_differ_where_one_request_differs():
    spec = Synthetic(9, 5, 3)
    w = spec.build(vocab_size=100, seed=1)
    changed = list(eager_requests(spec, vocab_size=100, seed=1))
    changed[4] = WorkloadRequest("r4", 0.0, (1, 2, 3, 4, 5), changed[4].sampling_params)
    assert w != Workload(tuple(changed), w.name, w.config)
    assert w.requests != tuple(changed)[:8] and w != spec.build(vocab_size=100, seed=2)


@pytest.mark.parametrize("rate", [2.5, math.inf])
def test_jsonl_and_pickle_round_trips_give_an_equal_workload(rate, tmp_path):
    w = ShareGPTLike(300, max_len=256).build(vocab_size=32000, seed=4, rate=rate)
    w.to_jsonl(tmp_path / "w.jsonl")
    loaded = Workload.from_jsonl(tmp_path / "w.jsonl")
    assert loaded == w and w == loaded and isinstance(loaded.requests, tuple)
    assert pickle.loads(pickle.dumps(w)) == w


def test_workload_takes_generated_requests_unread(monkeypatch):
    """Building a Workload (ShareGPTLike re-wraps Synthetic's) makes no request: the order
    and the rids are the generator's guarantee."""
    made = []
    real = GeneratedRequests._make
    monkeypatch.setattr(GeneratedRequests, "_make", lambda self, a, b: made.append(a) or real(self, a, b))
    w = ShareGPTLike(5000).build(vocab_size=128256, seed=0, rate=20.0)
    assert made == [] and isinstance(w.requests, GeneratedRequests)
    w.requests[4097]
    assert made == [4096]


def test_follow_ups_are_checked_against_the_generated_rids():
    reqs = Synthetic(3, 4, 2).build(vocab_size=10).requests
    turn = FollowUp("t1", "r2", 0.5, (1,), SamplingParams(max_new_tokens=1))
    assert Workload(reqs, followups=(turn,)).followups == (turn,)
    for rid, after in (("r1", "r2"), ("t1", "r3"), ("t1", "r02"), ("t1", "t1")):
        with pytest.raises(ValueError, match=r"duplicate rid|not another request"):
            Workload(reqs, followups=(FollowUp(rid, after, 0.5, (1,), turn.sampling_params),))


def test_generated_arrivals_out_of_order_are_refused():
    reqs = Synthetic(3, 4, 2).build(vocab_size=10).requests
    with pytest.raises(ValueError, match="in order"):
        GeneratedRequests(np.array([0.0, 2.0, 1.0]), reqs.output_lens, reqs.prompts, None)


def _refusal(sched: Scheduler, requests) -> tuple | None:
    """The first refusal of checking each request at arrival, as check_workload words it."""
    for r in requests:
        try:
            sched.check_request(r.to_req())
        except InvalidRequestError as e:
            return e.field, e.value, f"request {r.rid!r}: {e.reason}"
    return None


checked_templates = st.one_of(st.none(), st.builds(
    SamplingParams, return_logprob=st.booleans(), logprob_start_len=st.integers(-1, 12)))


@settings(max_examples=200)
@given(st.integers(1, 30), length_dists(max_len=30), length_dists(max_len=12), checked_templates,
       st.integers(1, 300), st.integers(1, 300), st.integers(4, 80),
       st.integers(0, 2**32))
def test_a_generated_workload_is_refused_as_checking_each_request_refuses_it(
        n, prompt, output, template, vocab, model_vocab, kv_tokens, seed):
    """Checking the stand-ins first (then each request only when one is refused) names the
    same first refused request, with the same reason, as checking every request: prompts
    too long for the context or the KV pool, tokens outside a smaller vocabulary, a
    logprob_start_len beyond the prompt."""
    w = Synthetic(n, prompt, output, template).build(vocab_size=vocab, seed=seed)
    sched = Scheduler(EngineConfig(max_total_tokens=kv_tokens), ModelInfo(model_vocab, (0,), 32))
    expected = _refusal(sched, w)
    if expected is None:
        check_workload(sched, w)
    else:
        with pytest.raises(InvalidRequestError) as info:
            check_workload(sched, w)
        assert (info.value.field, info.value.value, info.value.reason) == expected


def test_a_servable_generated_workload_is_checked_without_making_its_requests(monkeypatch):
    made = []
    real = GeneratedRequests._make
    monkeypatch.setattr(GeneratedRequests, "_make", lambda self, a, b: made.append(a) or real(self, a, b))
    w = ShareGPTLike(5000).build(vocab_size=128256, seed=0, rate=20.0)
    stand_ins = w.requests.stand_ins()
    assert 0 < len(stand_ins) <= 2 * len(w.requests.params)
    check_workload(build_simulation(keep=Keep(trace=False)).scheduler, w)
    assert made == []


def test_requests_of_one_output_length_share_one_sampling_params():
    reqs = Synthetic(3000, 8, Uniform(1, 5)).build(vocab_size=10).requests
    assert len({id(r.sampling_params) for r in reqs}) == len(reqs.params) == 5
