"""Prefill/decode disaggregation: TTFT is the prefill's plus the KV transfer, by hand; the
client's token streams are the co-located engine's."""

from __future__ import annotations

import gc
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import SamplingParams, ShareGPTLike, Workload
from shared.workload.workload import WorkloadRequest
from sim.fleet.disagg_layout import Disaggregated, parse_layout
from sim.model.embedded_configs import config_dict
from sim.run.simulate import simulate
from sim.run.token_source import SyntheticTokenSource
from tests.strategies import disagg_layouts, small_engine_args, stream_workloads

FREE = {"kv_link_latency": 0.0, "kv_link_bandwidth": math.inf}


def _spaced(n: int, prompt: int = 512, output: int = 32, gap: float = 0.5,
            max_new: int | None = None) -> Workload:
    """Requests `gap` seconds apart (no two transfers ever share the link)."""
    params = SamplingParams(max_new_tokens=max_new or output, ignore_eos=True)
    return Workload(tuple(WorkloadRequest(f"r{i}", i * gap, tuple(range(i, i + prompt)), params)
                          for i in range(n)))


def _prefill_ttft(result) -> dict[str, float]:
    return {rid: rec.first_token_time - rec.arrival_time
            for t in result.run.prefill_traces for rid, rec in t.requests.items()}


@pytest.mark.parametrize("overlap", [True, False])
def test_a_free_link_adds_nothing_to_the_prefill_instances_ttft(overlap):
    """Zero latency, infinite bandwidth and ample decode capacity: each request's TTFT is
    exactly its TTFT on the prefill instance."""
    r = simulate(_spaced(12), layout=Disaggregated(1, 2, **FREE),
                 disable_overlap_schedule=not overlap, keep_trace=True)
    ttft = dict(zip(r.requests["rid"], r.requests["ttft"], strict=True))
    assert ttft == _prefill_ttft(r)
    assert (r.requests["transfer"] == 0).all() and r.summary["completed"] == 12


def test_a_finite_link_adds_its_transfer_time_computed_by_hand():
    """Llama-3-8B bf16 at tp 1: 32 layers x 2 x 8 KV heads x 128 x 2 bytes = 131072 bytes per
    token; 512 tokens over 50 GB/s plus 9.6 us."""
    r = simulate(_spaced(12), layout=Disaggregated(1, 1), keep_trace=True)
    expected = 9.6e-6 + 512 * 131072 / 50e9
    prefill = _prefill_ttft(r)
    for rid, ttft in zip(r.requests["rid"], r.requests["ttft"], strict=True):
        assert ttft - prefill[rid] == pytest.approx(expected, rel=1e-9)


def test_transfers_on_one_link_queue_one_after_the_other():
    """Four requests at once on one prefill instance: each transfer starts when the one
    before it ended."""
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    w = Workload(tuple(WorkloadRequest(f"r{i}", 0.0, tuple(range(i, i + 256)), params)
                       for i in range(4)))
    r = simulate(w, layout=Disaggregated(1, 1, kv_link_bandwidth=1e9), keep_trace=True)
    spans = sorted(r.run.transfers.values())
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))


def test_every_request_is_decoded_once_and_one_token_requests_stay_on_prefill():
    """2P2D: each request is on one prefill and (unless it wants one token) one decode
    instance, with all its tokens counted."""
    w = ShareGPTLike(60).build(vocab_size=128256, rate=20.0, seed=1)
    ones = _spaced(3, max_new=1)
    r = simulate(Workload((*w.requests, *(
        WorkloadRequest(f"one{i}", q.arrival_time, q.input_ids, q.sampling_params)
        for i, q in enumerate(ones.requests)))), layout=Disaggregated(2, 2, decode_router="least_load"),
                 keep_trace=True)
    assert r.summary["completed"] == 63
    by_rid = r.requests.set_index("rid")
    assert (by_rid.loc[[f"one{i}" for i in range(3)], "decode_instance"] == -1).all()
    wanted = {q.rid: q.sampling_params.max_new_tokens for q in w}
    assert all(by_rid.loc[rid, "output_len"] == n for rid, n in wanted.items())
    assert set(r.run.decode_of) == set(wanted)


def test_layouts_are_read_as_xpyd():
    assert parse_layout("2P4D") == (2, 4) and parse_layout("1p1d") == (1, 1)
    for bad in ("2P", "0P1D", "PD", "2x4"):
        with pytest.raises(ValueError, match="xPyD"):
            parse_layout(bad)


def test_each_side_runs_its_own_tp_and_ep():
    """Mixtral: prefill on 2 GPUs without EP, decode on 4 with EP 4, as their trace headers
    record; the link carries the prefill rank's KV shard."""
    r = simulate(_spaced(4, prompt=256), model="mixtral-8x7b",
                 layout=Disaggregated(1, 1, prefill_tp=2, decode_tp=4, decode_ep=4), keep_trace=True)
    pre, dec = r.run.prefill_traces[0].executor, r.run.decode_traces[0].executor
    assert (pre["tp"], pre.get("ep_size", 1)) == (2, 1) and (dec["tp"], dec["ep_size"]) == (4, 4)
    # 32 layers x 2 x (8 KV heads / 2 ranks) x 128 x 2 bytes per token per prefill rank
    expected = 9.6e-6 + 256 * 32 * 2 * 4 * 128 * 2 / 50e9
    assert all(e - s == pytest.approx(expected) for s, e in r.run.transfers.values())


# --- the client's token streams: those of the co-located engine ------------------------------

# NOTE: a vocabulary of 8 and a token source over all of it (EOS, id 0, included): streams
# end early at EOS and at stop ids often.
TINY = {**config_dict("smollm2-135m"), "vocab_size": 8}


def _client_records(result) -> dict:
    """rid -> the record of the instance that ended the request (decode, else prefill)."""
    traces = (*result.run.prefill_traces, *result.run.decode_traces)
    return {rid: rec for t in traces for rid, rec in t.requests.items()}


def test_the_decode_instance_continues_from_the_prefills_first_token():
    """The decode instance holds the first token as output 0 and samples output 1 next: the
    client sees the co-located stream (not the first token twice), a stop token ends it at
    the same place, and max_new_tokens counts the first token."""
    source = SyntheticTokenSource(0, 8, ())
    params = (SamplingParams(max_new_tokens=6, ignore_eos=True),
              SamplingParams(max_new_tokens=6, stop_token_ids=[3, 5]))
    w = Workload(tuple(WorkloadRequest(f"r{i}", 0.0, (1, 2, 3, 4), params[i % 2])
                       for i in range(6)))
    co = simulate(w, model=TINY, token_source=source, max_total_tokens=2048, keep_trace=True)
    r = simulate(w, model=TINY, token_source=source, max_total_tokens=2048,
                 layout=Disaggregated(**FREE), keep_trace=True)
    client = _client_records(r)
    assert {rid: client[rid].output_ids for rid in co.trace.requests} == {
        rid: rec.output_ids for rid, rec in co.trace.requests.items()}
    assert any(rec.finish_reason.type == "stop" and rec.output_len > 1
               for rec in co.trace.requests.values())   # the example has a stop mid-stream
    assert r.requests.set_index("rid")["output_len"].to_dict() == \
        co.requests.set_index("rid")["output_len"].to_dict()


def test_a_request_retracted_on_a_decode_instance_resumes_from_its_outputs():
    """A tight decode KV pool retracts a received request: it is re-admitted over its prompt
    and every output so far, the first token included, and streams on as co-located."""
    source = SyntheticTokenSource(0, 8, ())
    w = Workload(tuple(WorkloadRequest(f"r{i}", 0.0, (1, 2, 3, 4),
                                       SamplingParams(max_new_tokens=8)) for i in range(4)))
    engine = {"max_total_tokens": 22, "schedule_conservativeness": 0.05}
    co = simulate(w, model=TINY, token_source=source, **engine, keep_trace=True)
    r = simulate(w, model=TINY, token_source=source, **engine, layout=Disaggregated(**FREE), keep_trace=True)
    decode = r.run.decode_traces[0].requests.values()
    assert sum(rec.num_retractions for rec in decode) > 0
    client = _client_records(r)
    assert all(client[rid].output_ids == rec.output_ids for rid, rec in co.trace.requests.items())


@pytest.mark.parametrize("overlap", [True, False])
@settings(max_examples=max(200, settings.default.max_examples))
@given(data=st.data())
def test_a_disaggregated_run_streams_what_the_co_located_engine_streams(overlap, data):
    """Any xPyD, KV link and routers: each request's tokens (ids and count) are the
    co-located engine's under the same token source, stop ids and EOS included, and so is
    the finish reason of each request a decode instance ended (the prefill instance ends
    the others by its one-token cap); the result's output_len counts each token once."""
    w = data.draw(stream_workloads(vocab_size=8))
    engine = {**data.draw(small_engine_args(w)), "disable_overlap_schedule": not overlap}
    layout = data.draw(disagg_layouts())
    source = SyntheticTokenSource(data.draw(st.integers(0, 3)), 8, ())
    co = simulate(w, model=TINY, token_source=source, bounds=False, **engine, keep_trace=True)
    r = simulate(w, model=TINY, token_source=source, layout=layout, **engine, keep_trace=True)
    client = _client_records(r)
    for rid, rec in co.trace.requests.items():
        assert client[rid].output_ids == rec.output_ids, rid
        if rid in r.run.decode_of:
            assert client[rid].finish_reason == rec.finish_reason, rid
    assert r.requests.set_index("rid")["output_len"].to_dict() == \
        co.requests.set_index("rid")["output_len"].to_dict()


def test_a_disaggregated_run_leaves_no_scheduler_to_the_cyclic_collector():
    """As a fleet's (tests/test_sim_fleet.py): every instance is freed with the run, not
    left in a reference cycle to the paused collector's rare full collection."""
    from shared.loop.scheduler import Scheduler

    def tracked() -> int:
        return sum(type(o) is Scheduler for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = tracked()
        simulate(_spaced(4, prompt=16, output=4, gap=0.01), layout=Disaggregated(1, 2),
                 model="smollm2-135m", keep_trace=True)
        assert tracked() == before
    finally:
        gc.enable()
