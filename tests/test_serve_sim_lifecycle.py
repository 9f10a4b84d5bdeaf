"""`batchtwin serve --simulate`'s serving behaviour: the queue gate, shutdown and a stopped
engine, disconnects, the trace it saves, and how answers get their text and their end."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("openai", reason="the openai client is a test dependency")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

from experiments.serve.text_codec import PlaceholderCodec
from tests.serve_helpers import metric_samples, openai_client, start_sim_server


def test_a_full_queue_answers_503_with_a_retry_hint_and_then_serves_again():
    """With --max-queued-requests 1, a request beside one still waiting for its first token
    gets 503 and Retry-After; the waiting one completes, and a later one is served."""
    import threading
    import time

    import httpx

    base, stop = start_sim_server(["--max-queued-requests", "1", "--time-scale", "0.005"])
    body = {"model": "llama-3-8b", "prompt": "slow " * 8, "max_tokens": 1}
    first: list[httpx.Response] = []
    try:
        t = threading.Thread(target=lambda: first.append(
            httpx.post(f"{base}/v1/completions", json=body, timeout=60)))
        t.start()
        while not sum(metric_samples(base)[f"vllm:num_requests_{s}"] for s in ("running", "waiting")):
            time.sleep(0.01)
        refused = httpx.post(f"{base}/v1/completions", json=body)
        t.join()
        again = httpx.post(f"{base}/v1/completions", json=body, timeout=60)
    finally:
        stop()
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert "max-queued-requests" in refused.json()["error"]["message"]
    assert first[0].status_code == 200 and again.status_code == 200


def test_a_served_runs_trace_out_replays(tmp_path):
    """--trace-out saves the served run's step trace at shutdown (answers ended early by
    --output-len-median among them); batchtwin replay --strict reproduces its schedule."""
    from experiments.main import main

    trace = tmp_path / "served.jsonl"
    base, stop = start_sim_server(["--time-scale", "50", "--trace-out", str(trace), "--output-len-median", "3"])
    try:
        for i in range(3):
            openai_client(base).completions.create(model="llama-3-8b", prompt=f"r{i} " * 30, max_tokens=4)
    finally:
        stop()
    from shared.trace.trace import Trace

    assert len(Trace.load(trace).requests) == 3
    assert main(["replay", str(trace), "--no-plot", "--hardware", "h100", "--strict"]) == 0


def test_requests_after_the_engine_stopped_get_503_not_a_server_error():
    """Once the engine stopped (shutting down, or its thread failed) a request is answered
    503 naming why, not a 500."""
    from fastapi.testclient import TestClient

    from experiments.serve.app import create_app
    from shared.online.serving_loop import ServingLoop
    from sim.run.build import build_simulation
    from sim.run.online_sim import SimStepper

    engine = ServingLoop(SimStepper(build_simulation(model="llama-3-8b", hardware="h100"), "m", 50.0))
    with TestClient(create_app(engine, PlaceholderCodec(engine.vocab_size))) as client:
        assert client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2}).status_code == 200
        engine.stop()
        r = client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 503 and "shutting down" in r.json()["error"]["message"]


def test_a_client_that_gives_up_on_a_whole_answer_frees_its_kv():
    """A non-streamed request whose client disconnects is aborted at once (not decoded to
    its 2000th token): the server shows nothing running and no KV in use.

    NOTE: at time scale 0.1 its decode would take over 100 s of wall time (2000 steps of
    5-7 ms simulated), so the 60 s wait only detects a hang: a loaded host slows the decode,
    never the check."""
    import time

    import httpx

    base, stop = start_sim_server(["--time-scale", "0.1"])
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{base}/v1/completions", timeout=0.5, json={
                "model": "llama-3-8b", "prompt": "long " * 50, "max_tokens": 2000, "ignore_eos": True})
        deadline = time.monotonic() + 60
        while metric_samples(base)["vllm:num_requests_running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        gauges = metric_samples(base)
    finally:
        stop()
    assert gauges["vllm:num_requests_running"] == 0 and gauges["vllm:kv_cache_usage_perc"] == 0


def test_a_simulated_model_with_a_tokenizer_counts_and_writes_with_it(tmp_path):
    """--model FOLDER with a tokenizer.json beside config.json: prompt_tokens is that
    tokenizer's count and the answer is its text, not placeholders."""
    import json

    import httpx

    tokenizers = pytest.importorskip("tokenizers")
    from sim.model.from_config import embedded_configs

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(["the capital of France is Paris", "a server streams tokens"] * 20,
                            tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {**embedded_configs()["llama-3-8b"], "vocab_size": tok.get_vocab_size(),
              "eos_token_id": 0, "bos_token_id": 0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    base, stop = start_sim_server(["--model", str(tmp_path), "--served-model-name", "m", "--time-scale", "50"])
    prompt = "the capital of France is"
    try:
        r = httpx.post(f"{base}/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 6}).json()
    finally:
        stop()
    assert r["usage"]["prompt_tokens"] == len(tok.encode(prompt).ids)
    assert r["usage"]["completion_tokens"] == 6 and not re.search(r" t\d", r["choices"][0]["text"])


def test_output_len_median_ends_answers_with_eos_at_seeded_lengths():
    """--output-len-median: answers end with finish reason stop at lengths drawn per request
    (the same on a fresh server with the same seed), capped by max_tokens (length);
    ignore_eos requests run to max_tokens."""
    def lengths() -> list[tuple[int, str]]:
        base, stop = start_sim_server(["--time-scale", "50", "--output-len-median", "6",
                               "--output-len-sigma", "0.8", "--seed", "4"])
        try:
            client = openai_client(base)
            got = [client.completions.create(model="llama-3-8b", prompt=f"q{i} " * 8, max_tokens=20)
                   for i in range(12)]
            assert all(len(r.choices[0].text.split()) == r.usage.completion_tokens
                       - (r.choices[0].finish_reason == "stop") for r in got)   # EOS: no text
            full = client.completions.create(model="llama-3-8b", prompt="x", max_tokens=20,
                                             extra_body={"ignore_eos": True})
        finally:
            stop()
        assert full.usage.completion_tokens == 20 and full.choices[0].finish_reason == "length"
        return [(r.usage.completion_tokens, r.choices[0].finish_reason) for r in got]

    first = lengths()
    assert first == lengths()
    assert len({n for n, _ in first}) > 3
    assert all(reason == "stop" for n, reason in first if n < 20)
    assert all(reason in ("stop", "length") for _, reason in first)
    assert any(reason == "stop" for _, reason in first)
