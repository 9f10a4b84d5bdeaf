"""`create_app(engine, codec)`: the FastAPI app of `batchtwin serve`, over any
`shared.online_engine.OnlineEngine` (it never asks which).

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/completions` and
`POST /v1/chat/completions` (OpenAI's schemas; `stream` as server-sent events ending in
`data: [DONE]`, `stream_options.include_usage` adding a usage chunk), `GET /metrics`
(`experiments.serve.metrics`). Bad input is a 400 with an
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
from experiments.serve.openai_request import ChatRequest, CompletionRequest, usage
from experiments.serve.response_style import ChatStyle, TextStyle
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

    async def serve(body, prompt: list[int], style, request: Request):
        if body.model != engine.model_name:
            return error_response(404, f"model {body.model!r} does not exist (serving "
                                       f"{engine.model_name!r})", "model", "not_found_error")
        if body.n != 1:
            return error_response(400, f"n={body.n}: only n=1 is supported", "n")
        rid = f"{style.prefix}-{next(ids)}"
        stream = RequestStream(asyncio.get_running_loop())
        try:
            engine.submit(rid, prompt, body.sampling_params(), stream)
        except InvalidRequestError as e:
            field = OPENAI_FIELDS.get(e.field, e.field)
            return error_response(400, str(e).replace(e.field, field, 1), field)
        metrics.submitted(rid, len(prompt), engine.now())
        answer = Answer(engine, codec, stream, metrics, style, len(prompt),
                        {"id": rid, "created": int(time.time()), "model": engine.model_name})
        if body.stream:
            return StreamingResponse(answer.sse(body.include_usage),
                                     media_type="text/event-stream")
        return await answer.whole()

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        prompt = codec.encode(body.prompt) if isinstance(body.prompt, str) else body.prompt
        return await serve(body, prompt, TextStyle, request)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        return await serve(body, codec.encode(body.prompt_text()), ChatStyle, request)

    return app


class Answer:
    """One request's answer, whole or as server-sent events."""

    def __init__(self, engine: OnlineEngine, codec, stream: RequestStream,
                 metrics: ServerMetrics, style, prompt_len: int, meta: dict) -> None:
        self.engine, self.codec, self.stream, self.metrics = engine, codec, stream, metrics
        self.style, self.prompt_len, self.meta = style, prompt_len, meta

    async def whole(self) -> dict:
        tokens, last = [], None
        async for event in self.stream.events():
            tokens += event.token_ids
            self.metrics.event(self.meta["id"], event)
            last = event
        return {**self.meta, "object": self.style.object,
                "choices": [self.style.choice(self.codec.decode(tokens), _reason(last))],
                "usage": usage(self.prompt_len, len(tokens), last.cached_tokens)}

    async def sse(self, include_usage: bool) -> AsyncIterator[str]:
        count, meta = 0, {**self.meta, "object": self.style.chunk_object}
        try:
            async for event in self.stream.events():
                self.metrics.event(self.meta["id"], event)
                choice = self.style.delta(self.codec.decode(event.token_ids),
                                          _reason(event) if event.finish else None, count == 0)
                count += len(event.token_ids)
                yield f"data: {json.dumps({**meta, 'choices': [choice]})}\n\n"
                if event.finish is not None and include_usage:
                    tail = {**meta, "choices": [],
                            "usage": usage(self.prompt_len, count, event.cached_tokens)}
                    yield f"data: {json.dumps(tail)}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:   # NOTE: the client went away: free its KV
            self.engine.abort(self.meta["id"])
            raise


def _reason(event: TokenEvent | None) -> str | None:
    if event is None or event.finish is None:
        return None
    return "length" if event.finish.type == "length" else "stop" if event.finish.type == "stop" \
        else "abort"
