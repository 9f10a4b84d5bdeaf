"""bench_peer's BLIS export: the TraceV2 pair holds exactly the requests `batchtwin simulate`
simulates for the benchmark's workload flags (no BLIS needed)."""

from __future__ import annotations

import csv
import math

import pytest

from experiments.bench.bench_peer import TRACE_COLUMNS, cli_workload, write_trace_v2
from shared.workload.sharegpt import ShareGPTLike
from sim.run.build import load_model


def read_rows(path):
    with path.open(newline="") as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("rate", [20.0, math.inf])
def test_benchmark_workload_is_the_sharegpt_like_build(rate):
    vocab = load_model("llama-3-8b")[1].vocab_size
    assert cli_workload(50, rate) == ShareGPTLike(50).build(vocab_size=vocab, seed=0, rate=rate)


@pytest.mark.parametrize("rate", [20.0, math.inf])
def test_trace_rows_hold_each_requests_arrival_us_and_token_counts(tmp_path, rate):
    workload = cli_workload(200, rate)
    header, data = write_trace_v2(workload, tmp_path / "trace")
    head, *rows = read_rows(data)
    assert head == list(TRACE_COLUMNS) and len(head) == 27
    assert len(rows) == len(workload.requests) == 200
    col = {name: i for i, name in enumerate(head)}
    for i, (row, req) in enumerate(zip(rows, workload.requests, strict=True)):
        assert len(row) == 27
        assert int(row[col["request_id"]]) == i
        assert int(row[col["arrival_time_us"]]) == round(req.arrival_time * 1e6)
        assert int(row[col["input_tokens"]]) == len(req.input_ids)
        assert int(row[col["output_tokens"]]) == req.sampling_params.max_new_tokens
    assert "time_unit: microseconds" in header.read_text()


def test_rate_20_arrivals_spread_over_seconds_in_microseconds(tmp_path):
    _, data = write_trace_v2(cli_workload(200, 20.0), tmp_path / "trace")
    head, *rows = read_rows(data)
    last_us = int(rows[-1][head.index("arrival_time_us")])
    assert 5e6 < last_us < 20e6   # 200 requests at 20/s: ~10 s, written as microseconds
