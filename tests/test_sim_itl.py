"""ITL of simulated runs (`vllm bench serve`'s definition): a request of n tokens has n - 1
gaps, in a single engine, a fleet and a disaggregated deployment, under either schedule;
the tokens the steps sampled are the requests' outputs, counted once."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.trace.run_result import STEP_FIELDS_READ
from shared.trace.trace_itl import trace_inter_token_latencies
from sim.fleet.fleet_layout import Fleet
from sim.model.embedded_configs import config_dict
from sim.routers import ROUTERS
from sim.run.simulate import simulate
from sim.run.token_source import SyntheticTokenSource
from tests.strategies import disagg_layouts, small_engine_args, stream_workloads

# NOTE: a vocabulary of 8 and a token source over all of it (EOS, id 0, included): streams
# end early at EOS and at stop ids often.
TINY = {**config_dict("smollm2-135m"), "vocab_size": 8}


def _run(layout: str, data, workload, engine: dict, source):
    """(the result, its traces in the order a request's tokens were sampled: a
    disaggregated run's prefill instances first)."""
    if layout == "single":
        r = simulate(workload, model=TINY, token_source=source, bounds=False, **engine, keep_trace=True)
        return r, [r.trace]
    if layout == "fleet":
        fleet = Fleet(data.draw(st.integers(2, 3)), data.draw(st.sampled_from(sorted(ROUTERS))))
        r = simulate(workload, model=TINY, token_source=source, bounds=False, **engine,
                     layout=fleet, keep_trace=True)
        return r, list(r.traces)
    r = simulate(workload, model=TINY, token_source=source, **engine,
                 layout=data.draw(disagg_layouts()), keep_trace=True)
    return r, [*r.run.prefill_traces, *r.run.decode_traces]


def _sampled_streams(traces) -> dict[str, list[int]]:
    """rid -> the ids its rows in the steps sampled (not -1), traces and steps in order."""
    streams: dict[str, list[int]] = {}
    for t in traces:
        for step in t.steps:
            for rid, tok in zip(step.rids, step.next_token_ids, strict=True):
                if tok != -1:
                    streams.setdefault(rid, []).append(tok)
    return streams


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("layout", ["single", "fleet", "disaggregated"])
@settings(max_examples=max(200, settings.default.max_examples))
@given(data=st.data())
def test_a_request_of_n_tokens_has_n_minus_1_itl_gaps(layout, overlap, data):
    """Over the completed requests: the tokens the steps sampled for each are its output ids
    (the client's record: a decode instance's, else the one engine's) and its output_len;
    the pooled ITL, from which the summary's ITL comes, has sum(n - 1) gaps summing to
    sum(finish - first token); the summary's output tokens are the sampled ones."""
    w = data.draw(stream_workloads(vocab_size=8))
    engine = {**data.draw(small_engine_args(w)), "disable_overlap_schedule": not overlap}
    source = SyntheticTokenSource(data.draw(st.integers(0, 3)), 8, ())
    result, traces = _run(layout, data, w, engine, source)
    done = result.completed_requests
    rids = set(done["rid"])
    records = {rid: rec for t in traces for rid, rec in t.requests.items()}  # the last wins
    streams = _sampled_streams(traces)
    for rid, n in zip(done["rid"], done["output_len"], strict=True):
        assert streams[rid] == list(records[rid].output_ids) and len(streams[rid]) == n, rid
    gaps = np.concatenate([np.zeros(0), *(trace_inter_token_latencies(
        t, dict(zip(STEP_FIELDS_READ, t.step_columns(*STEP_FIELDS_READ), strict=True)), rids)
        for t in traces)])
    assert len(gaps) == int((done["output_len"] - 1).sum())
    spans = done["finish_time"] - done["first_token_time"]
    assert gaps.sum() == pytest.approx(float(spans.sum()), abs=1e-9)
    s = result.summary
    if len(gaps):
        assert s["itl_mean"] == pytest.approx(gaps.mean())
    else:
        assert math.isnan(s["itl_mean"])
    assert s["output_throughput"] * s["duration"] == pytest.approx(
        sum(len(streams[rid]) for rid in rids))
