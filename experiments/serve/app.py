"""`create_app(engine, codec, options)`: the FastAPI app of `batchtwin serve`, over any
`shared.online.online_engine.OnlineEngine` (it never asks which).

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/completions` and
`POST /v1/chat/completions` (OpenAI's schemas, `experiments.serve.answer`), SGLang's
`POST /generate` and `GET /get_server_info` (`experiments.serve.sglang_routes`), and
`GET /metrics` (`experiments.serve.metrics`). Bad input is a 400 with an OpenAI-style body
naming the field (404 for an unknown model, 503 when the queue is full), and nothing in
flight is touched. At shutdown the engine aborts what is still in flight, drains and runs
its idle leak check; with `options.trace_out` its step trace is then saved.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from experiments.serve.answer import Answer
from experiments.serve.disconnect import unless_disconnected
from experiments.serve.errors import error_response, validation_error_response
from experiments.serve.frontend import Frontend
from experiments.serve.metrics import ServerMetrics
from experiments.serve.openai_request import ChatRequest, CompletionRequest, SamplingFields
from experiments.serve.options import ServeOptions
from experiments.serve.response_style import ChatStyle, TextStyle
from experiments.serve.sglang_routes import add_sglang_routes
from shared.online.online_engine import OnlineEngine


def create_app(engine: OnlineEngine, codec, options: ServeOptions | None = None) -> FastAPI:
    options = options or ServeOptions()
    front = Frontend(engine, codec, ServerMetrics(engine), options)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        engine.start()
        yield
        engine.stop()
        if options.trace_out:
            engine.trace().save(options.trace_out)

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
        body, content_type = front.metrics.render()
        return Response(body, media_type=content_type)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        prompt = body.prompt
        encode = (lambda: codec.encode(prompt)) if isinstance(prompt, str) else (lambda: list(prompt))
        return await _serve(front, request, body, encode, TextStyle)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        messages = [m.model_dump() for m in body.messages]
        return await _serve(front, request, body, lambda: codec.encode_chat(messages), ChatStyle)

    add_sglang_routes(app, front)
    return app


async def _serve(front: Frontend, request: Request, body: SamplingFields, encode, style):
    refused = front.check_model(body.model)
    if refused is not None:
        return refused
    if body.n != 1:
        return error_response(400, f"n={body.n}: only n=1 is supported", "n")
    got = front.submit(style.prefix, encode, body.sampling_params)
    if isinstance(got, JSONResponse):
        return got
    meta = {"id": got.rid, "created": int(time.time()), "model": front.engine.model_name}
    answer = Answer(front, style, got, meta, body.wants_logprobs)
    if body.stream:
        return StreamingResponse(answer.sse(body.include_usage), media_type="text/event-stream")
    return await unless_disconnected(request, answer.whole(), lambda: front.abandon(got.rid))
