"""`batchtwin serve --simulate` on loopback, through the `openai` client: completions,
streaming, errors by field, and /metrics against the requests sent."""

from __future__ import annotations

import asyncio
import re

import pytest

openai = pytest.importorskip("openai", reason="the openai client is a test dependency")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from experiments.bench_serve_mock import app_thread, free_port  # noqa: E402
from experiments.cli import build_parser  # noqa: E402
from experiments.serve.cmd import build_app  # noqa: E402
from experiments.serve.text_codec import PlaceholderCodec  # noqa: E402


@pytest.fixture(scope="module")
def server():
    port = free_port()
    args = build_parser().parse_args(["serve", "--simulate", "--time-scale", "20"])
    stop = app_thread(build_app(args), port)
    yield f"http://127.0.0.1:{port}"
    stop()


def _client(base: str):
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def test_a_completion_returns_max_tokens_and_counts_the_prompt(server):
    prompt = "The capital of France is" * 4
    r = _client(server).completions.create(model="llama-3-8b", prompt=prompt, max_tokens=12)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12 and len(r.choices[0].text.split()) == 12
    assert r.usage.prompt_tokens == len(PlaceholderCodec(128256).encode(prompt))


def test_a_stream_sends_every_token_then_usage_and_done(server):
    chunks = list(_client(server).completions.create(
        model="llama-3-8b", prompt="hello " * 20, max_tokens=9, stream=True,
        stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len("".join(texts).split()) == 9
    assert chunks[-1].usage.completion_tokens == 9 and not chunks[-1].choices
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_a_chat_completion_answers_as_the_assistant(server):
    r = _client(server).chat.completions.create(
        model="llama-3-8b", messages=[{"role": "user", "content": "Say hi"}], max_tokens=7)
    assert r.choices[0].message.role == "assistant" and r.choices[0].finish_reason == "length"
    assert len(r.choices[0].message.content.split()) == 7 and r.usage.completion_tokens == 7


def test_a_chat_stream_sends_the_role_then_content_deltas(server):
    chunks = list(_client(server).chat.completions.create(
        model="llama-3-8b", messages=[{"role": "user", "content": "Count"}],
        max_completion_tokens=6, stream=True, stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert len("".join(d.content or "" for d in deltas).split()) == 6
    assert chunks[-1].usage.completion_tokens == 6


def test_models_lists_the_served_model(server):
    assert [m.id for m in _client(server).models.list().data] == ["llama-3-8b"]


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"model": "gpt-9"}, "NotFoundError", "model"),
    ({"max_tokens": 0}, "BadRequestError", "max_tokens"),
    ({"prompt": "a long prompt " * 3000}, "BadRequestError", "prompt"),
    ({"n": 2}, "BadRequestError", "n"),
    ({"temperature": -1.0}, "BadRequestError", "temperature"),
    ({"max_tokens": "many"}, "BadRequestError", "max_tokens"),
])
def test_bad_requests_get_an_openai_error_naming_the_field(server, kwargs, error, field):
    args = {"model": "llama-3-8b", "prompt": "hi", "max_tokens": 4, **kwargs}
    with pytest.raises(getattr(openai, error)) as e:
        _client(server).completions.create(**args)
    assert e.value.body["param"] == field


def test_bad_requests_leave_sixteen_streams_to_finish_and_metrics_count_them(server):
    """16 streams in flight while bad requests come and go: every stream ends with its
    tokens; /metrics' generation-token and success counters grow by exactly what was sent."""
    before = _metrics(server)

    async def main():
        client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)

        async def stream(i: int) -> int:
            n = 0
            async for c in await client.completions.create(
                    model="llama-3-8b", prompt=f"request {i} " * 10, max_tokens=20, stream=True):
                n += len(c.choices[0].text.split()) if c.choices else 0
            return n

        async def bad() -> None:
            for _ in range(5):
                with pytest.raises(openai.BadRequestError):
                    await client.completions.create(model="llama-3-8b", prompt="x",
                                                    max_tokens=-1)
        results = await asyncio.gather(*(stream(i) for i in range(16)), bad())
        await client.close()
        return results[:16]

    assert asyncio.run(main()) == [20] * 16
    after = _metrics(server)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 320
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == 16


def _metrics(base: str) -> dict[str, float]:
    import httpx

    text = httpx.get(f"{base}/metrics").text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.name.endswith("_created")}


def test_simulator_only_flags_are_refused_in_real_mode(capsys):
    """--hardware without --simulate is a usage error naming the flag, before anything loads."""
    from experiments.cli import main

    assert main(["serve", "--hardware", "h100"]) == 1
    assert "--hardware go(es) with --simulate" in capsys.readouterr().err


def _started(argv: list[str]):
    """(base url, stop()) of `batchtwin serve --simulate ARGV` on a free port."""
    port = free_port()
    return f"http://127.0.0.1:{port}", app_thread(build_app(build_parser().parse_args(
        ["serve", "--simulate", *argv])), port)


def test_generate_and_server_info_answer_in_sglangs_shape(server):
    """/generate gives SGLang's text, output_ids and meta_info; /get_server_info the engine's
    config and its internal state."""
    import httpx

    r = httpx.post(f"{server}/generate", json={
        "text": "hello " * 8, "sampling_params": {"max_new_tokens": 5}}).json()
    assert len(r["output_ids"]) == 5 and r["meta_info"]["completion_tokens"] == 5
    assert r["meta_info"]["finish_reason"]["type"] == "length"
    info = httpx.get(f"{server}/get_server_info").json()
    assert info["served_model_name"] == "llama-3-8b" and "max_running_requests" in info
    assert info["internal_states"][0]["num_running_reqs"] >= 0


def test_a_full_queue_answers_503_with_a_retry_hint_and_then_serves_again():
    """With --max-queued-requests 1, a request beside one still waiting for its first token
    gets 503 and Retry-After; the waiting one completes, and a later one is served."""
    import threading
    import time

    import httpx

    base, stop = _started(["--max-queued-requests", "1", "--time-scale", "0.005"])
    body = {"model": "llama-3-8b", "prompt": "slow " * 8, "max_tokens": 1}
    first: list[httpx.Response] = []
    try:
        t = threading.Thread(target=lambda: first.append(
            httpx.post(f"{base}/v1/completions", json=body, timeout=60)))
        t.start()
        while not sum(_metrics(base)[f"vllm:num_requests_{s}"] for s in ("running", "waiting")):
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
    """--trace-out saves the served run's step trace at shutdown; batchtwin replay reads it
    and finds every request."""
    from experiments.cli import main

    trace = tmp_path / "served.jsonl"
    base, stop = _started(["--time-scale", "50", "--trace-out", str(trace)])
    try:
        for i in range(3):
            _client(base).completions.create(model="llama-3-8b", prompt=f"r{i} " * 30, max_tokens=4)
    finally:
        stop()
    from shared.trace import Trace

    assert len(Trace.load(trace).requests) == 3
    assert main(["replay", str(trace), "--no-plot", "--hardware", "h100"]) == 0


def test_requests_after_the_engine_stopped_get_503_not_a_server_error():
    """Once the engine stopped (shutting down, or its thread failed) a request is answered
    503 naming why, not a 500."""
    from fastapi.testclient import TestClient

    from experiments.serve.app import create_app
    from sim.online_sim import SimulatedOnlineEngine
    from sim.simulate import build_simulation

    engine = SimulatedOnlineEngine(build_simulation(model="llama-3-8b", hardware="h100"), "m", 50.0)
    with TestClient(create_app(engine, PlaceholderCodec(engine.vocab_size))) as client:
        assert client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2}).status_code == 200
        engine.stop()
        r = client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 503 and "shutting down" in r.json()["error"]["message"]


def test_bench_serve_shared_prefix_hits_the_servers_prefix_cache(server, capsys):
    """bench serve's shared-prefix dataset completes against the simulated server, and the
    server's prefix cache counts hits: the groups' system prompts arrive as shared text."""
    from experiments.cli import main

    before = _metrics(server)
    assert main(["bench", "serve", "--base-url", server, "--model", "llama-3-8b",
                 "--dataset-name", "shared-prefix", "--gsp-num-groups", "2",
                 "--gsp-prompts-per-group", "6", "--gsp-system-prompt-len", "256",
                 "--gsp-question-len", "16", "--gsp-output-len", "4", "--request-rate", "40"]) == 0
    assert re.search(r"Successful requests:\s+12\s", capsys.readouterr().out)
    after = _metrics(server)
    hits = after["vllm:prefix_cache_hits_total"] - before.get("vllm:prefix_cache_hits_total", 0)
    assert hits >= 5 * 256   # NOTE: of 10 * 256 at most; a prompt beside its group's first prefill misses


@pytest.mark.parametrize(("body", "param", "says"), [
    (b"{not json", None, "not valid JSON"),
    (b"[1, 2]", None, "the request body: "),
    (b'{"model": "llama-3-8b", "prompt": {"a": 1}}', "prompt", "valid string; or"),
])
def test_a_body_that_is_not_a_request_gets_a_400_naming_the_problem(server, body, param, says):
    """Malformed JSON, a non-object, a prompt of no allowed type: 400 with OpenAI's error
    body naming the field (none for the body as a whole) and what was wrong."""
    import httpx

    r = httpx.post(f"{server}/v1/completions", content=body, headers={"content-type": "application/json"})
    error = r.json()["error"]
    assert r.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["param"] == param and says in error["message"]


def test_a_client_that_gives_up_on_a_whole_answer_frees_its_kv():
    """A non-streamed request whose client disconnects is aborted at once (not decoded to
    its 2000th token): the server shows nothing running and no KV in use."""
    import time

    import httpx

    base, stop = _started(["--time-scale", "1"])
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{base}/v1/completions", timeout=0.5, json={
                "model": "llama-3-8b", "prompt": "long " * 50, "max_tokens": 2000, "ignore_eos": True})
        deadline = time.monotonic() + 5
        while _metrics(base)["vllm:num_requests_running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        gauges = _metrics(base)
    finally:
        stop()
    assert gauges["vllm:num_requests_running"] == 0 and gauges["vllm:kv_cache_usage_perc"] == 0


def test_a_simulated_model_with_a_tokenizer_counts_and_writes_with_it(tmp_path):
    """--model FOLDER with a tokenizer.json beside config.json: prompt_tokens is that
    tokenizer's count and the answer is its text, not placeholders."""
    import json

    import httpx

    tokenizers = pytest.importorskip("tokenizers")
    from sim.model_shapes import embedded_configs

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(["the capital of France is Paris", "a server streams tokens"] * 20,
                            tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {**embedded_configs()["llama-3-8b"], "vocab_size": tok.get_vocab_size(),
              "eos_token_id": 0, "bos_token_id": 0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    base, stop = _started(["--model", str(tmp_path), "--served-model-name", "m", "--time-scale", "50"])
    prompt = "the capital of France is"
    try:
        r = httpx.post(f"{base}/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 6}).json()
    finally:
        stop()
    assert r["usage"]["prompt_tokens"] == len(tok.encode(prompt).ids)
    assert r["usage"]["completion_tokens"] == 6 and not re.search(r" t\d", r["choices"][0]["text"])
