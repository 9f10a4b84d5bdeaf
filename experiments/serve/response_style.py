"""How an answer is shaped for each endpoint: `/v1/completions` (text) or
`/v1/chat/completions` (an assistant message, streamed as deltas), in OpenAI's schema.

`logprobs(tokens, values, tops)`: the chosen tokens' logprobs and, per token, its top
alternatives ((text, logprob) pairs, most likely first; none when not asked for) in the
endpoint's layout (completions: `top_logprobs` a dict of text -> logprob per token, null
without alternatives; chat: a list per token), or None when the request asked for none or
the engine has none (the simulator).
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
    def logprobs(tokens: list[str], values: tuple[float, ...], tops: list[list]) -> dict[str, Any] | None:
        if not values:
            return None
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        top = [dict(pairs) for pairs in tops] if any(tops) else None
        return {"tokens": tokens, "token_logprobs": list(values), "top_logprobs": top,
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
    def logprobs(tokens: list[str], values: tuple[float, ...], tops: list[list]) -> dict[str, Any] | None:
        if not values:
            return None
        return {"content": [{"token": t, "logprob": v, "bytes": list(t.encode()),
                             "top_logprobs": [_chat_entry(a, lp) for a, lp in top]}
                            for t, v, top in zip(tokens, values, tops, strict=False)]}


def _chat_entry(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}
