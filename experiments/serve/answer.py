"""`Answer`: one OpenAI request's answer (`/v1/completions`, `/v1/chat/completions`), whole
or as server-sent events ending in `data: [DONE]` (with `stream_options.include_usage` a
last chunk carrying usage). The text is the engine's own (stop strings cut) when it
detokenizes, else the codec's decoding of the token ids. A client that goes away mid-stream
aborts its request, and its KV is freed at the engine's next step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from experiments.serve.frontend import Frontend, Submitted
from experiments.serve.openai_request import usage
from shared.online.online_engine import TokenEvent


class Answer:
    def __init__(self, front: Frontend, style, request: Submitted, meta: dict,
                 want_logprobs: bool) -> None:
        self.front, self.codec, self.metrics, self.style = front, front.codec, front.metrics, style
        self.request, self.meta, self.want_logprobs = request, meta, want_logprobs

    def logprobs(self, token_ids, values: tuple[float, ...], tops: tuple = ()):
        if not self.want_logprobs:
            return None
        word = self.codec.decode
        alternatives = [[(word([t]), lp) for t, lp in top] for top in tops] or [[] for _ in token_ids]
        return self.style.logprobs([word([t]) for t in token_ids], values, alternatives)

    async def whole(self) -> dict:
        tokens, values, tops, text, last = [], (), (), "", None
        async for event in self.request.stream.events():
            self.metrics.event(self.request.rid, event)
            tokens += event.token_ids
            values += event.logprobs
            tops += event.top_logprobs
            text += self.front.text(event)
            last = event
        choice = self.style.choice(text, finish_reason(last), self.logprobs(tokens, values, tops))
        return {**self.meta, "object": self.style.object, "choices": [choice],
                "usage": usage(self.request.prompt_len, len(tokens), last.cached_tokens)}

    async def sse(self, include_usage: bool) -> AsyncIterator[str]:
        count, meta = 0, {**self.meta, "object": self.style.chunk_object}
        try:
            async for event in self.request.stream.events():
                self.metrics.event(self.request.rid, event)
                choice = self.style.delta(self.front.text(event), finish_reason(event), count == 0,
                                          self.logprobs(event.token_ids, event.logprobs,
                                                        event.top_logprobs))
                count += len(event.token_ids)
                yield f"data: {json.dumps({**meta, 'choices': [choice]})}\n\n"
                if event.finish is not None and include_usage:
                    tail = {**meta, "choices": [],
                            "usage": usage(self.request.prompt_len, count, event.cached_tokens)}
                    yield f"data: {json.dumps(tail)}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:   # NOTE: the client went away: free its KV
            self.front.abandon(self.request.rid)
            raise


def finish_reason(event: TokenEvent | None) -> str | None:
    """OpenAI's finish_reason: "length", "stop", or "abort" (as vLLM reports an abort)."""
    if event is None or event.finish is None:
        return None
    return {"length": "length", "stop": "stop"}.get(event.finish.type, "abort")
