"""`create_app(engine, codec)`: the FastAPI app of `batchtwin serve`, over any
`shared.online_engine.OnlineEngine` (it never asks which).

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/completions` (OpenAI's schema; `stream`
as server-sent events ending in `data: [DONE]`, `stream_options.include_usage` adding a
usage chunk), `GET /metrics` (`experiments.serve.metrics`). Bad input is a 400 with an
OpenAI-style body naming the field (404 for an unknown model), and nothing in flight is
touched; a client that disconnects mid-stream aborts its request (its KV freed).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from experiments.serve.errors import error_response, validation_error_response
from experiments.serve.metrics import ServerMetrics
from experiments.serve.openai_request import CompletionRequest, usage
from shared.invalid_request import InvalidRequestError
from shared.online_engine import OnlineEngine, TokenEvent

# NOTE: the spec's names for the fields OpenAI's schema calls otherwise
OPENAI_FIELDS = {"max_new_tokens": "max_tokens", "sampling_seed": "seed",
                 "top_logprobs_num": "logprobs", "input_ids": "prompt"}


class RequestStream:
    """One request's events, carried from the engine's thread into the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue()

    def __call__(self, event: TokenEvent) -> None:   # called on the engine's thread
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    async def events(self) -> AsyncIterator[TokenEvent]:
        while True:
            event = await self.queue.get()
            yield event
            if event.finish is not None:
                return


def create_app(engine: OnlineEngine, codec) -> FastAPI:
    metrics = ServerMetrics(engine)
    ids = itertools.count()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        engine.start()
        yield
        engine.stop()

    app = FastAPI(title="batchtwin serve", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error_response(exc.errors())

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": engine.model_name, "object": "model",
                                             "created": 0, "owned_by": "batchtwin",
                                             "max_model_len": engine.context_length}]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        if body.model != engine.model_name:
            return error_response(404, f"model {body.model!r} does not exist (serving "
                                       f"{engine.model_name!r})", "model", "not_found_error")
        if body.n != 1:
            return error_response(400, f"n={body.n}: only n=1 is supported", "n")
        prompt = codec.encode(body.prompt) if isinstance(body.prompt, str) else body.prompt
        rid = f"cmpl-{next(ids)}"
        stream = RequestStream(asyncio.get_running_loop())
        try:
            engine.submit(rid, prompt, body.sampling_params(), stream)
        except InvalidRequestError as e:
            field = OPENAI_FIELDS.get(e.field, e.field)
            return error_response(400, str(e).replace(e.field, field, 1), field)
        metrics.submitted(rid, len(prompt), engine.now())
        meta = {"id": rid, "created": int(time.time()), "model": engine.model_name}
        if body.stream:
            return StreamingResponse(_sse(engine, codec, stream, meta, len(prompt), body,
                                          metrics, request), media_type="text/event-stream")
        return await _complete(codec, stream, meta, len(prompt), metrics)

    return app


async def _complete(codec, stream: RequestStream, meta: dict, prompt_len: int,
                    metrics: ServerMetrics) -> dict:
    tokens, last = [], None
    async for event in stream.events():
        tokens += event.token_ids
        metrics.event(meta["id"], event)
        last = event
    return {**meta, "object": "text_completion",
            "choices": [{"index": 0, "text": codec.decode(tokens), "logprobs": None,
                         "finish_reason": _reason(last)}],
            "usage": usage(prompt_len, len(tokens), last.cached_tokens)}


async def _sse(engine: OnlineEngine, codec, stream: RequestStream, meta: dict, prompt_len: int,
               body: CompletionRequest, metrics: ServerMetrics,
               request: Request) -> AsyncIterator[str]:
    count = 0
    try:
        async for event in stream.events():
            metrics.event(meta["id"], event)
            count += len(event.token_ids)
            chunk = {**meta, "object": "text_completion", "choices": [{
                "index": 0, "text": codec.decode(event.token_ids), "logprobs": None,
                "finish_reason": _reason(event) if event.finish else None}]}
            yield f"data: {json.dumps(chunk)}\n\n"
            if event.finish is not None and body.include_usage:
                tail = {**meta, "object": "text_completion", "choices": [],
                        "usage": usage(prompt_len, count, event.cached_tokens)}
                yield f"data: {json.dumps(tail)}\n\n"
        yield "data: [DONE]\n\n"
    except asyncio.CancelledError:   # NOTE: the client went away: free its KV
        engine.abort(meta["id"])
        raise


def _reason(event: TokenEvent | None) -> str | None:
    if event is None or event.finish is None:
        return None
    return "length" if event.finish.type == "length" else "stop" if event.finish.type == "stop" \
        else "abort"
