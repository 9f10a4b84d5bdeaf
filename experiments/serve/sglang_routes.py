"""SGLang's native endpoints: `POST /generate` and `GET /get_server_info`.

`/generate` takes SGLang's body (`text` or `input_ids`, `sampling_params` with SGLang's
names, `stream`, `return_logprob`) for one prompt (a batch of prompts is refused: send one
request each) and answers `{"text", "output_ids", "meta_info"}` with `meta_info` as SGLang's
(`id`, `finish_reason` as a dict, `prompt_tokens`, `completion_tokens`, `cached_tokens`,
`e2e_latency`, and `output_token_logprobs` when asked for, `output_top_logprobs` with
`top_logprobs_num`). Streamed, each server-sent event
carries the text and ids so far (SGLang's default, not increments), then `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict

from experiments.serve.disconnect import unless_disconnected
from experiments.serve.errors import error_response
from experiments.serve.frontend import Frontend, Submitted
from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams

SGLANG_FIELDS = {"input_ids": "input_ids"}


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | None = None
    stream: bool = False
    return_logprob: bool = False


def add_sglang_routes(app: FastAPI, front: Frontend) -> None:
    @app.get("/get_server_info")
    async def server_info() -> dict:
        s = front.engine.stats()
        return {**front.engine.server_info(), "version": _version(),
                "internal_states": [{"num_running_reqs": s.running, "num_waiting_reqs": s.waiting,
                                     "kv_cache_usage": s.kv_usage}]}

    @app.post("/generate")
    async def generate(body: GenerateRequest, request: Request):
        if isinstance(body.text, list) or (body.input_ids and isinstance(body.input_ids[0], list)):
            return error_response(400, "a batch of prompts is not supported: send one "
                                       "/generate request per prompt", "text")
        if (body.text is None) == (body.input_ids is None):
            return error_response(400, "give exactly one of text and input_ids", "text")
        got = front.submit("gen", lambda: _prompt(front, body), lambda: _params(body), SGLANG_FIELDS)
        if isinstance(got, JSONResponse):
            return got
        answer = GenerateAnswer(front, got)
        if body.stream:
            return StreamingResponse(answer.sse(), media_type="text/event-stream")
        return await unless_disconnected(request, answer.whole(), lambda: front.abandon(got.rid))


def _prompt(front: Frontend, body: GenerateRequest) -> list[int]:
    return front.codec.encode(body.text) if body.text is not None else list(body.input_ids)


def _params(body: GenerateRequest) -> SamplingParams:
    d = dict(body.sampling_params or {})
    if isinstance(d.get("stop"), str):
        d["stop"] = (d["stop"],)
    elif isinstance(d.get("stop"), list):
        d["stop"] = tuple(d["stop"])
    if "return_logprob" in d:
        raise InvalidRequestError("sampling_params", sorted(d), "return_logprob is a top-level field")
    return SamplingParams.from_dict({**d, "return_logprob": body.return_logprob})


class GenerateAnswer:
    def __init__(self, front: Frontend, request: Submitted) -> None:
        self.front, self.request = front, request
        self.ids: list[int] = []
        self.text, self.logprobs, self.tops, self.start = "", [], [], front.engine.now()

    def add(self, event) -> dict:
        self.front.metrics.event(self.request.rid, event)
        self.ids += event.token_ids
        self.logprobs += event.logprobs
        self.tops += event.top_logprobs
        self.text += self.front.text(event)
        return self.body(event)

    def body(self, event) -> dict:
        meta = {"id": self.request.rid,
                "finish_reason": event.finish.to_dict() if event.finish else None,
                "prompt_tokens": self.request.prompt_len, "completion_tokens": len(self.ids),
                "cached_tokens": event.cached_tokens, "e2e_latency": event.time - self.start}
        if self.logprobs:
            meta["output_token_logprobs"] = [[v, t, None] for v, t in zip(self.logprobs, self.ids, strict=False)]
        if self.tops:
            meta["output_top_logprobs"] = [[[lp, t, None] for t, lp in top] for top in self.tops]
        return {"text": self.text, "output_ids": list(self.ids), "meta_info": meta}

    async def whole(self) -> dict:
        body = None
        async for event in self.request.stream.events():
            body = self.add(event)
        return body

    async def sse(self) -> AsyncIterator[str]:
        try:
            async for event in self.request.stream.events():
                yield f"data: {json.dumps(self.add(event))}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:   # NOTE: the client went away: free its KV
            self.front.abandon(self.request.rid)
            raise


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("batchtwin")
    except PackageNotFoundError:
        return "unknown"
