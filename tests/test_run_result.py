"""RunResult: per-request and pooled serving metrics with `vllm bench serve` definitions,
on traces built by hand (no scheduler involved)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings

from shared.config.engine_config import EngineConfig, ModelInfo
from shared.request.finish_reason import FinishReason
from shared.request.sampling_params import SamplingParams
from shared.trace.run_result import REQUEST_COLUMNS, SLO, STEP_COLUMNS, RunResult
from shared.trace.trace import RequestRecord, Trace
from tests.strategies import token_timelines

MODEL = ModelInfo(vocab_size=100, eos_token_ids=(0,), context_length=64)
TICK = 0.25


def _trace():
    return Trace(EngineConfig().resolve(MODEL, kv_capacity=256), MODEL)


def _request(trace, rid, arrival, prompt_len, output_len, first, finish, finish_type="length",
             cached=0, retractions=0):
    fr = {"length": FinishReason.by_length(output_len), "stop": FinishReason.by_stop(0),
          "abort": FinishReason.by_abort("client went away"), None: None}[finish_type]
    trace.requests[rid] = RequestRecord(
        rid, arrival, tuple(range(1, prompt_len + 1)), SamplingParams(max_new_tokens=output_len),
        output_len, fr, first, finish, cached, retractions, tuple(range(output_len)))


def _step(trace, mode, rids, next_ids, start, duration, extend_lens=None):
    """Append a StepRecord with every field; `extend_lens` per rid on EXTEND steps."""
    n = len(rids)
    lens = tuple(extend_lens) if extend_lens is not None else ()
    num_tokens = sum(lens) if lens else n
    rows = tuple(range(num_tokens))
    trace.append_step(
        step=len(trace), forward_mode=mode, rids=tuple(rids), input_ids=rows, positions=rows,
        out_cache_loc=tuple(r + 1 for r in rows), req_pool_indices=tuple(range(n)),
        seq_lens=tuple([8] * n), extend_prefix_lens=tuple([0] * len(lens)), extend_seq_lens=lens,
        extend_start_loc=tuple(np.cumsum((0, *lens))[:-1].tolist()) if lens else (),
        extend_logprob_start_lens=tuple([0] * len(lens)), pruned_rows=(),
        sample_indices=tuple(range(n)), next_token_ids=tuple(next_ids), graph=False,
        padded_batch_size=n, start_time=start, duration=duration,
        queue_len=1, kv_used_tokens=10 * (len(trace) + 1))


def _two_requests(slo=None):
    """A (arrives 0.0, 4 prompt, 3 out) and B (arrives 0.5, 4 prompt in two chunks, 2 out).

    Token times: A at 1.0, 1.75, 2.25; B at 1.5 (its first chunk's row is -1), 1.75."""
    trace = _trace()
    _request(trace, "A", 0.0, 4, 3, first=1.0, finish=2.25)
    _request(trace, "B", 0.5, 4, 2, first=1.5, finish=1.75, finish_type="stop", cached=1,
             retractions=1)
    _step(trace, "EXTEND", ["A"], [7], 0.0, 1.0, extend_lens=[4])
    _step(trace, "EXTEND", ["B"], [-1], 1.0, 0.25, extend_lens=[2])
    _step(trace, "EXTEND", ["B"], [8], 1.25, 0.25, extend_lens=[2])
    _step(trace, "DECODE", ["A", "B"], [9, 10], 1.5, 0.25)
    _step(trace, "DECODE", ["A"], [11], 1.75, 0.5)
    return trace


def test_request_latencies_match_hand_computed_example():
    """TTFT = first token - arrival, E2E = finish - arrival, TPOT = (E2E - TTFT)/(out - 1)."""
    df = RunResult.from_trace(_two_requests()).requests.set_index("rid")
    assert df.loc["A", ["ttft", "e2e", "tpot"]].tolist() == [1.0, 2.25, 0.625]
    assert df.loc["B", ["ttft", "e2e", "tpot"]].tolist() == [1.0, 1.25, 0.25]
    assert df.loc["B", ["prompt_len", "output_len", "cached_tokens"]].tolist() == [4, 2, 1]


def test_summary_matches_hand_computed_example():
    """Means and percentiles of TTFT/TPOT/E2E, throughput over last finish - first arrival."""
    s = RunResult.from_trace(_two_requests()).summary
    assert (s["ttft_mean"], s["ttft_p50"]) == (1.0, 1.0)
    assert (s["tpot_mean"], s["e2e_mean"], s["e2e_p50"]) == (0.4375, 1.75, 1.75)
    assert s["e2e_p90"] == pytest.approx(1.25 + 0.9 * 1.0)
    assert (s["duration"], s["completed"]) == (2.25, 2)
    assert s["request_throughput"] == pytest.approx(2 / 2.25)
    assert s["output_throughput"] == pytest.approx(5 / 2.25)
    assert "goodput" not in s


def test_itl_pools_gaps_between_sampled_tokens_skipping_discarded_rows():
    """ITL gaps are A: 0.75, 0.5 and B: 0.25 (the -1 chunk row is not a token), pooled."""
    s = RunResult.from_trace(_two_requests()).summary
    assert (s["itl_mean"], s["itl_p50"]) == (0.5, 0.5)
    assert s["itl_p90"] == pytest.approx(np.percentile([0.75, 0.5, 0.25], 90))
    assert s["itl_p99"] == pytest.approx(0.745)


def test_a_discarded_row_in_a_decode_step_is_not_a_token():
    """Under overlap a request finishing in decode step N still holds a discarded (-1) row
    in step N + 1: A's 3 tokens (1.0, 1.5, 2.0) give 2 gaps, B's 4 tokens 3 (the last 1.0),
    no gap from A's 2.0 to its -1 row at 3.0."""
    trace = _trace()
    _request(trace, "A", 0.0, 4, 3, first=1.0, finish=2.0)
    _request(trace, "B", 0.0, 4, 4, first=1.0, finish=3.0)
    _step(trace, "EXTEND", ["A", "B"], [7, 8], 0.0, 1.0, extend_lens=[4, 4])
    _step(trace, "DECODE", ["A", "B"], [9, 10], 1.0, 0.5)
    _step(trace, "DECODE", ["A", "B"], [11, 12], 1.5, 0.5)
    _step(trace, "DECODE", ["A", "B"], [-1, 13], 2.0, 1.0)
    s = RunResult.from_trace(trace).summary
    assert s["itl_mean"] == pytest.approx((4 * 0.5 + 1.0) / 5)
    assert (s["itl_p50"], s["itl_p90"]) == (0.5, pytest.approx(0.8))


def test_retractions_and_cache_hits_are_summed():
    """num_retractions and cache_hit_tokens sum the request records."""
    s = RunResult.from_trace(_two_requests()).summary
    assert (s["num_retractions"], s["cache_hit_tokens"]) == (1, 1)


def test_tpot_is_nan_for_single_token_output_and_counts_as_zero_for_goodput():
    """output_len 1 has no TPOT (NaN, left out of the mean) and meets any TPOT SLO."""
    trace = _two_requests()
    _request(trace, "C", 0.0, 2, 1, first=0.5, finish=0.5)
    result = RunResult.from_trace(trace, slo=SLO(tpot=0.3))
    assert math.isnan(result.requests.set_index("rid").loc["C", "tpot"])
    assert result.summary["tpot_mean"] == 0.4375
    assert result.summary["goodput"] == pytest.approx(2 / 2.25)  # B and C


@pytest.mark.parametrize(("slo", "good"), [
    (SLO(ttft=1.0, tpot=0.5), 1),  # A's TPOT 0.625 misses
    (SLO(ttft=0.99), 0),
    (SLO(e2e=2.25), 2),            # the bound itself meets the objective
    (SLO(e2e=2.0, ttft=5.0), 1),
    (SLO(), 2),
])
def test_goodput_counts_requests_meeting_every_slo(slo, good):
    """goodput = completed requests meeting every given SLO / duration (vllm --goodput)."""
    assert RunResult.from_trace(_two_requests(), slo=slo).summary["goodput"] == pytest.approx(good / 2.25)


def test_aborted_and_unfinished_requests_are_excluded_from_stats():
    """An aborted request keeps its row but changes no latency, ITL or throughput figure."""
    trace = _two_requests()
    _request(trace, "X", 0.25, 3, 2, first=1.5, finish=1.75, finish_type="abort", cached=2)
    _request(trace, "Y", 0.3, 3, 0, first=math.nan, finish=math.nan, finish_type=None)
    _step(trace, "DECODE", ["X"], [5], 1.5, 0.05)
    result = RunResult.from_trace(trace)
    baseline = RunResult.from_trace(_two_requests()).summary
    assert list(result.requests["rid"]) == ["A", "B", "X", "Y"]
    assert list(result.completed_requests["rid"]) == ["A", "B"]
    for key in ("completed", "duration", "request_throughput", "itl_mean", "ttft_mean", "e2e_p99"):
        assert result.summary[key] == baseline[key], key
    assert result.summary["cache_hit_tokens"] == 3


def test_frames_have_exactly_the_documented_columns():
    """.requests and .steps columns are exactly the documented lists, in order."""
    result = RunResult.from_trace(_two_requests())
    assert list(result.requests.columns) == list(REQUEST_COLUMNS) == [
        "rid", "arrival", "first_token_time", "finish_time", "prompt_len", "output_len",
        "cached_tokens", "ttft", "tpot", "e2e", "max_itl", "replica"]
    assert list(result.steps.columns) == list(STEP_COLUMNS) == [
        "step", "forward_mode", "batch_size", "num_tokens", "kv_used_tokens", "queue_len",
        "start_time", "duration", "bound", "replica"]


def test_steps_without_bounds_have_an_empty_bound_and_given_ones_are_kept():
    """An exec trace knows no bound (""); bounds given per step fill the column."""
    trace = _two_requests()
    assert RunResult.from_trace(trace).steps["bound"].tolist() == [""] * 5
    bounds = ["compute", "compute", "memory", "memory", "cpu"]
    assert RunResult.from_trace(trace, bounds=bounds).steps["bound"].tolist() == bounds
    with pytest.raises(ValueError, match="4 step bounds for 5 steps"):
        RunResult.from_trace(trace, bounds=bounds[:4])


def test_steps_frame_counts_rows_and_tokens_per_step():
    """batch_size = len(rids) and num_tokens = len(input_ids), one row per StepRecord."""
    steps = RunResult.from_trace(_two_requests()).steps
    assert steps["batch_size"].tolist() == [1, 1, 1, 2, 1]
    assert steps["num_tokens"].tolist() == [4, 2, 2, 2, 1]
    assert steps["forward_mode"].tolist() == ["EXTEND"] * 3 + ["DECODE"] * 2
    assert steps["kv_used_tokens"].tolist() == [10, 20, 30, 40, 50]


def test_empty_trace_gives_empty_frames_and_nan_metrics():
    """No requests and no steps: frames with the right columns, NaN stats, no error."""
    result = RunResult.from_trace(_trace(), slo=SLO(ttft=1.0))
    assert list(result.requests.columns) == list(REQUEST_COLUMNS) and result.requests.empty
    assert list(result.steps.columns) == list(STEP_COLUMNS) and result.steps.empty
    assert result.summary["completed"] == 0
    assert all(math.isnan(result.summary[k]) for k in ("duration", "ttft_mean", "itl_p99", "goodput"))


def test_negative_slo_rejected():
    """An SLO must be a non-negative number of seconds."""
    with pytest.raises(ValueError, match="ttft"):
        SLO(ttft=-1.0)


@settings(max_examples=50)
@given(token_timelines())
def test_itl_per_request_sums_to_e2e_minus_ttft(timelines):
    """With one step per sampled token, the pooled ITL has sum(out - 1) gaps summing to
    sum(E2E - TTFT), and each request's TPOT is the mean of its own gaps."""
    trace = _trace()
    events = []
    for i, (arrival, ticks) in enumerate(timelines):
        _request(trace, f"r{i}", arrival * TICK, 2, len(ticks), ticks[0] * TICK, ticks[-1] * TICK)
        events += [(t, f"r{i}") for t in ticks]
    for t, rid in sorted(events):
        _step(trace, "DECODE", [rid], [1], (t - 1) * TICK, TICK)
    result = RunResult.from_trace(trace)
    df = result.requests
    gaps = sum(len(ticks) - 1 for _, ticks in timelines)
    expected = float((df["e2e"] - df["ttft"]).sum())
    itl_total = result.summary["itl_mean"] * gaps if gaps else 0.0
    assert itl_total == pytest.approx(expected)
    if gaps:
        weighted = (df["tpot"] * (df["output_len"] - 1)).sum()
        assert weighted == pytest.approx(expected)


def test_step_values_name_every_step_record_field_in_its_order():
    """The scheduler's by-name step records (StepValues) are StepRecord's fields, in order,
    with the same defaults."""
    import dataclasses

    from shared.trace.step_record import StepRecord, StepValues

    fields = dataclasses.fields(StepRecord)
    assert StepValues._fields == tuple(f.name for f in fields)
    assert StepValues._field_defaults == {f.name: f.default for f in fields
                                          if f.default is not dataclasses.MISSING}


def test_each_request_holds_its_largest_gap_between_tokens():
    """A's tokens at 1.0, 1.75, 2.25 (gaps 0.75, 0.5), B's at 1.5, 1.75 (one of 0.25)."""
    result = RunResult.from_trace(_two_requests())
    assert list(result.requests["max_itl"]) == [0.75, 0.25]
    assert result.summary["max_itl_p50"] == 0.5 and result.summary["max_itl_mean"] == 0.5


def test_a_per_token_limit_holds_every_gap_of_a_request():
    """max_itl 0.5 s: B (largest gap 0.25) meets it, A (a gap of 0.75) does not, whatever its
    mean gap (0.625): half the requests attain the SLO, and goodput counts B alone."""
    result = RunResult.from_trace(_two_requests(), SLO(max_itl=0.5))
    assert result.summary["slo_attainment"] == 0.5
    assert result.summary["goodput"] == 1 / result.summary["duration"]
    assert RunResult.from_trace(_two_requests(), SLO(max_itl=0.75)).summary["slo_attainment"] == 1.0
    with pytest.raises(ValueError, match="max_itl"):
        SLO(max_itl=-1.0)
