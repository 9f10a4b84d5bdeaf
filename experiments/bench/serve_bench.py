"""The client side of `batchtwin bench serve`: send a workload to any OpenAI-compatible
server (batchtwin's, SGLang's, vLLM's) at its arrival times, stream every completion, and
measure what `vllm bench serve` measures, by its definitions: TTFT (send to first streamed
token), TPOT ((E2E - TTFT) / (output tokens - 1)), ITL (gaps between streamed chunks),
E2E, throughputs over the benchmark's duration (first send to last response).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Sent(NamedTuple):
    prompt: str
    max_tokens: int
    delay: float          # seconds after the start at which to send it


class Outcome(NamedTuple):
    sent_at: float        # seconds after the start
    ttft: float
    e2e: float
    output_tokens: int
    prompt_tokens: int
    itl: tuple[float, ...]
    error: str = ""


async def run_requests(base_url: str, model: str, requests: Sequence[Sent],
                       max_concurrency: int | None = None) -> tuple[list[Outcome], float]:
    """Every request's outcome (in order) and the benchmark's duration. Streams over plain
    HTTP (httpx; `vllm bench serve` uses aiohttp), not the openai client, to keep the
    client's own time per chunk small."""
    import httpx

    url = f"{base_url.rstrip('/')}/v1/completions"
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        start = time.perf_counter()

        async def one(r: Sent) -> Outcome:
            await asyncio.sleep(max(0.0, r.delay - (time.perf_counter() - start)))
            if gate is None:
                return await _stream(client, url, model, r, start)
            async with gate:
                return await _stream(client, url, model, r, start)

        outcomes = await asyncio.gather(*(one(r) for r in requests))
        duration = time.perf_counter() - start
    return list(outcomes), duration


async def _stream(client, url: str, model: str, r: Sent, start: float) -> Outcome:
    import httpx

    payload = {"model": model, "prompt": r.prompt, "max_tokens": r.max_tokens, "stream": True,
               "stream_options": {"include_usage": True}, "ignore_eos": True}
    t0 = time.perf_counter()
    times, tokens, prompt_tokens = [], 0, 0
    try:
        async with client.stream("POST", url, json=payload) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                return Outcome(t0 - start, np.nan, np.nan, 0, 0, (),
                               f"HTTP {response.status_code}: {body[:200]}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    times.append(time.perf_counter())
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                    prompt_tokens = chunk["usage"]["prompt_tokens"]
    except httpx.HTTPError as e:
        return Outcome(t0 - start, np.nan, np.nan, 0, 0, (), f"{type(e).__name__}: {e}")
    end = time.perf_counter()
    ttft = times[0] - t0 if times else np.nan
    return Outcome(t0 - start, ttft, end - t0, tokens, prompt_tokens,
                   tuple(np.diff(times).tolist()))


def summarize(outcomes: Sequence[Outcome], duration: float) -> dict[str, float]:
    """`vllm bench serve`'s result fields (milliseconds for latencies)."""
    ok = [o for o in outcomes if not o.error]
    tpot = [(o.e2e - o.ttft) / (o.output_tokens - 1) for o in ok if o.output_tokens > 1]
    out = {"duration": duration, "completed": len(ok), "failed": len(outcomes) - len(ok),
           "total_input_tokens": sum(o.prompt_tokens for o in ok),
           "total_output_tokens": sum(o.output_tokens for o in ok)}
    out["request_throughput"] = len(ok) / duration if duration > 0 else np.nan
    out["output_throughput"] = out["total_output_tokens"] / duration if duration > 0 else np.nan
    for name, values in (("ttft", [o.ttft for o in ok]), ("tpot", tpot),
                         ("itl", [g for o in ok for g in o.itl]), ("e2el", [o.e2e for o in ok])):
        v = np.array(values, dtype=float) * 1e3
        v = v[~np.isnan(v)]
        out[f"mean_{name}_ms"] = float(v.mean()) if v.size else np.nan
        out[f"median_{name}_ms"] = float(np.median(v)) if v.size else np.nan
        out[f"std_{name}_ms"] = float(v.std()) if v.size else np.nan
        for p in (90, 99):
            out[f"p{p}_{name}_ms"] = float(np.percentile(v, p)) if v.size else np.nan
    return out
