"""`Frontend`: what every generation endpoint does before and after the engine: check the
model name and n, encode the prompt, refuse when the queue is full, submit, and carry the
request's events from the engine's thread into the event loop (`RequestStream`).

A refusal is an OpenAI-style error response (400 naming the field, 404 for the model, 503
with Retry-After when more than `max_queued_requests` wait for their first token); nothing
in flight is touched by one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

from fastapi.responses import JSONResponse

from experiments.serve.errors import error_response
from experiments.serve.metrics import ServerMetrics
from experiments.serve.options import ServeOptions
from shared.online.online_engine import EngineUnavailable, OnlineEngine, TokenEvent
from shared.request.invalid_request import InvalidRequestError
from shared.request.sampling_params import SamplingParams

# NOTE: the spec's names for the fields OpenAI's schema calls otherwise
OPENAI_FIELDS = {"max_new_tokens": "max_tokens", "sampling_seed": "seed",
                 "top_logprobs_num": "logprobs", "input_ids": "prompt"}


class RequestStream:
    """One request's events, carried from the engine's thread into the event loop;
    `on_first` runs (on the engine's thread) at its first event."""

    def __init__(self, rid: str, loop: asyncio.AbstractEventLoop, on_first: Callable[[str], None]) -> None:
        self.rid, self.loop, self.queue, self._on_first = rid, loop, asyncio.Queue(), on_first

    def __call__(self, event: TokenEvent) -> None:   # called on the engine's thread
        if self._on_first is not None:
            self._on_first(self.rid)
            self._on_first = None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    async def events(self) -> AsyncIterator[TokenEvent]:
        while True:
            event = await self.queue.get()
            yield event
            if event.finish is not None:
                return


class Submitted:
    """An accepted request: its id, prompt length and event stream."""

    def __init__(self, rid: str, prompt_len: int, stream: RequestStream) -> None:
        self.rid, self.prompt_len, self.stream = rid, prompt_len, stream


class Frontend:
    def __init__(self, engine: OnlineEngine, codec, metrics: ServerMetrics,
                 options: ServeOptions) -> None:
        self.engine, self.codec, self.metrics, self.options = engine, codec, metrics, options
        self._ids = itertools.count()
        self._unstarted: set[str] = set()   # NOTE: added in the loop, discarded on the engine's thread

    def check_model(self, model: str | None) -> JSONResponse | None:
        if model is None or model == self.engine.model_name:
            return None
        return error_response(404, f"model {model!r} does not exist (serving "
                                   f"{self.engine.model_name!r})", "model", "not_found_error")

    def text(self, event: TokenEvent) -> str:
        """The event's text: the engine's own when it detokenizes, else the codec's."""
        return event.text if event.text is not None else self.codec.decode(event.token_ids)

    def abandon(self, rid: str) -> None:
        """Its client went away: abort the request (its KV is freed at the engine's next
        step) and stop counting it."""
        self.engine.abort(rid)
        self.metrics.forget(rid)

    def submit(self, prefix: str, encode: Callable[[], list[int]], params: Callable[[], SamplingParams],
               names: dict[str, str] = OPENAI_FIELDS) -> Submitted | JSONResponse:
        """Encode, check and submit one request (`names`: the endpoint's names for the
        spec's fields, in error messages)."""
        limit = self.options.max_queued_requests
        if limit is not None and len(self._unstarted) >= limit:
            return error_response(503, f"{len(self._unstarted)} requests are queued (the "
                                       f"server's --max-queued-requests is {limit}); retry later",
                                  None, "service_unavailable", {"Retry-After": str(self.options.retry_after_s)})
        rid = f"{prefix}-{next(self._ids)}"
        stream = RequestStream(rid, asyncio.get_running_loop(), self._unstarted.discard)
        try:
            prompt = encode()
            self._unstarted.add(rid)
            self.engine.submit(rid, prompt, params(), stream)
        except InvalidRequestError as e:
            self._unstarted.discard(rid)
            field = names.get(e.field, e.field)
            return error_response(400, str(e).replace(e.field, field, 1), field)
        except EngineUnavailable as e:
            self._unstarted.discard(rid)
            return error_response(503, str(e), None, "service_unavailable")
        self.metrics.submitted(rid, len(prompt), self.engine.now())
        return Submitted(rid, len(prompt), stream)
