"""How an answer is shaped for each endpoint: `/v1/completions` (text) or
`/v1/chat/completions` (an assistant message, streamed as deltas), in OpenAI's schema."""

from __future__ import annotations

from typing import Any


class TextStyle:
    prefix, object, chunk_object = "cmpl", "text_completion", "text_completion"

    @staticmethod
    def choice(text: str, reason: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}

    @staticmethod
    def delta(text: str, reason: str | None, first: bool) -> dict[str, Any]:
        return TextStyle.choice(text, reason)


class ChatStyle:
    prefix, object, chunk_object = "chatcmpl", "chat.completion", "chat.completion.chunk"

    @staticmethod
    def choice(text: str, reason: str | None) -> dict[str, Any]:
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": reason}

    @staticmethod
    def delta(text: str, reason: str | None, first: bool) -> dict[str, Any]:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
