"""How an answer is shaped for each endpoint: `/v1/completions` (text) or
`/v1/chat/completions` (an assistant message, streamed as deltas), in OpenAI's schema.

`logprobs(tokens, values)`: the chosen tokens' logprobs in the endpoint's layout (top
alternatives are not collected: `top_logprobs` is null for completions, [] for chat), or
None when the request asked for none or the engine has none (the simulator).
"""

from __future__ import annotations

from typing import Any


class TextStyle:
    prefix, object, chunk_object = "cmpl", "text_completion", "text_completion"

    @staticmethod
    def choice(text: str, reason: str | None, logprobs: Any = None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}

    @staticmethod
    def delta(text: str, reason: str | None, first: bool, logprobs: Any = None) -> dict[str, Any]:
        return TextStyle.choice(text, reason, logprobs)

    @staticmethod
    def logprobs(tokens: list[str], values: tuple[float, ...]) -> dict[str, Any] | None:
        if not values:
            return None
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        return {"tokens": tokens, "token_logprobs": list(values), "top_logprobs": None,
                "text_offset": offsets}


class ChatStyle:
    prefix, object, chunk_object = "chatcmpl", "chat.completion", "chat.completion.chunk"

    @staticmethod
    def choice(text: str, reason: str | None, logprobs: Any = None) -> dict[str, Any]:
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": logprobs, "finish_reason": reason}

    @staticmethod
    def delta(text: str, reason: str | None, first: bool, logprobs: Any = None) -> dict[str, Any]:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason}

    @staticmethod
    def logprobs(tokens: list[str], values: tuple[float, ...]) -> dict[str, Any] | None:
        if not values:
            return None
        return {"content": [{"token": t, "logprob": v, "bytes": list(t.encode()), "top_logprobs": []}
                            for t, v in zip(tokens, values, strict=False)]}
