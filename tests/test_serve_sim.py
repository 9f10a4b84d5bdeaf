"""`batchtwin serve --simulate` on loopback, through the `openai` client: completions,
streaming, errors by field, and /metrics against the requests sent."""

from __future__ import annotations

import asyncio
import re

import pytest

openai = pytest.importorskip("openai", reason="the openai client is a test dependency")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

from experiments.serve.text_codec import PlaceholderCodec  # noqa: E402
from tests.serve_helpers import metric_samples, openai_client, start_sim_server  # noqa: E402


@pytest.fixture(scope="module")
def server():
    base, stop = start_sim_server(["--time-scale", "20"])
    yield base
    stop()


def test_a_completion_returns_max_tokens_and_counts_the_prompt(server):
    prompt = "The capital of France is" * 4
    r = openai_client(server).completions.create(model="llama-3-8b", prompt=prompt, max_tokens=12)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12 and len(r.choices[0].text.split()) == 12
    assert r.usage.prompt_tokens == len(PlaceholderCodec(128256).encode(prompt))


def test_a_stream_sends_every_token_then_usage_and_done(server):
    chunks = list(openai_client(server).completions.create(
        model="llama-3-8b", prompt="hello " * 20, max_tokens=9, stream=True,
        stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len("".join(texts).split()) == 9
    assert chunks[-1].usage.completion_tokens == 9 and not chunks[-1].choices
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_a_chat_completion_answers_as_the_assistant(server):
    r = openai_client(server).chat.completions.create(
        model="llama-3-8b", messages=[{"role": "user", "content": "Say hi"}], max_tokens=7)
    assert r.choices[0].message.role == "assistant" and r.choices[0].finish_reason == "length"
    assert len(r.choices[0].message.content.split()) == 7 and r.usage.completion_tokens == 7


def test_a_chat_stream_sends_the_role_then_content_deltas(server):
    chunks = list(openai_client(server).chat.completions.create(
        model="llama-3-8b", messages=[{"role": "user", "content": "Count"}],
        max_completion_tokens=6, stream=True, stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert len("".join(d.content or "" for d in deltas).split()) == 6
    assert chunks[-1].usage.completion_tokens == 6


def test_models_lists_the_served_model(server):
    assert [m.id for m in openai_client(server).models.list().data] == ["llama-3-8b"]


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
        openai_client(server).completions.create(**args)
    assert e.value.body["param"] == field


def test_a_prompt_and_max_tokens_that_fill_the_context_get_a_400_naming_max_tokens(server):
    """prompt + max_tokens == the context length is refused (SGLang's `>=`, semantics §2.3)
    with OpenAI's error naming max_tokens; one token fewer is served."""
    client = openai_client(server)
    context = client.models.list().data[0].model_extra["max_model_len"]
    prompt = [1000] * (context - 2)   # token ids
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="llama-3-8b", prompt=prompt, max_tokens=2)
    assert e.value.body["param"] == "max_tokens"
    assert "exceeds the model's maximum context length" in e.value.body["message"]
    r = client.completions.create(model="llama-3-8b", prompt=prompt, max_tokens=1)
    assert r.usage.prompt_tokens + r.usage.completion_tokens == context - 1


def test_bad_requests_leave_sixteen_streams_to_finish_and_metrics_count_them(server):
    """16 streams in flight while bad requests come and go: every stream ends with its
    tokens; /metrics' generation-token and success counters grow by exactly what was sent."""
    before = metric_samples(server)

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
    after = metric_samples(server)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 320
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == 16


def test_simulator_only_flags_are_refused_in_real_mode(capsys):
    """--hardware without --simulate is a usage error naming the flag, before anything loads."""
    from experiments.main import main

    assert main(["serve", "--hardware", "h100"]) == 1
    assert "--hardware go(es) with --simulate" in capsys.readouterr().err


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


def test_bench_serve_shared_prefix_hits_the_servers_prefix_cache(server, capsys):
    """bench serve's shared-prefix dataset completes against the simulated server, and the
    server's prefix cache counts hits: the groups' system prompts arrive as shared text."""
    from experiments.main import main

    before = metric_samples(server)
    assert main(["bench", "serve", "--base-url", server, "--model", "llama-3-8b",
                 "--dataset-name", "shared-prefix", "--gsp-num-groups", "2",
                 "--gsp-prompts-per-group", "6", "--gsp-system-prompt-len", "256",
                 "--gsp-question-len", "16", "--gsp-output-len", "4", "--request-rate", "40"]) == 0
    assert re.search(r"Successful requests:\s+12\s", capsys.readouterr().out)
    after = metric_samples(server)
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




@pytest.mark.parametrize(("flags", "model"), [([], "kernel("), (["--cost-model", "roofline"], "roofline(")])
def test_serve_simulate_prices_with_the_kernel_cost_model_by_default(flags, model):
    """`serve --simulate` builds its engine on the default cost model, the kernel model
    (its server info names it); --cost-model roofline keeps the roofline."""
    import argparse

    from experiments.serve import serve_cmd

    parser = argparse.ArgumentParser()
    serve_cmd.configure(parser)
    engine, _ = serve_cmd._simulated(parser.parse_args(["--simulate", *flags]))
    assert engine.server_info()["cost_model"].startswith(model)
