"""Per-request output bookkeeping for the Engine: stop strings and incremental text.

Text is decoded from the whole output so far; a stream emits only the prefix that can no
longer change (no partial UTF-8 character, nothing that may still become a stop string),
so the concatenated stream equals the final text. A stop string ends the request and is
cut from the text (token ids keep every generated token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exec.engine.stop_strings import find_stop, safe_prefix_len, tail_tokens
from shared.request.finish_reason import FinishReason


@dataclass
class StreamOutput:
    """One streamed increment of a request: new text and token ids since the last one."""

    rid: str
    index: int
    text: str | None
    token_ids: list[int]
    finished: bool = False
    finish_reason: FinishReason | None = None


@dataclass
class OutputTracker:
    tokenizer: object | None
    stops: tuple[str, ...] = ()
    emitted_text: int = 0
    emitted_tokens: int = 0
    closed: bool = False  # the finished chunk went out: nothing follows it
    _tail: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._tail = tail_tokens(self.stops) if self.stops else 0

    def check_stop(self, output_ids: list[int], token: int) -> FinishReason | None:
        """Does appending `token` complete a stop string?"""
        if not self.stops:
            return None
        text = self._decode([*output_ids[-self._tail :], token])
        hit = find_stop(text, self.stops)
        return FinishReason.by_stop(hit[1]) if hit else None

    def final_text(self, output_ids: list[int], reason: FinishReason | None) -> str | None:
        if self.tokenizer is None:
            return None
        text = self._decode(output_ids)
        if reason is not None and reason.type == "stop" and isinstance(reason.matched, str):
            hit = find_stop(text, (reason.matched,))
            text = text[: hit[0]] if hit else text
        return text

    def increment(self, rid: str, index: int, output_ids: list[int],
                  reason: FinishReason | None) -> StreamOutput | None:
        """The next stream chunk (None when there is nothing new and the request runs on,
        or when its finished chunk was emitted already)."""
        if self.closed:
            return None
        self.closed = reason is not None
        new_ids = output_ids[self.emitted_tokens :]
        self.emitted_tokens = len(output_ids)
        text = None
        if self.tokenizer is not None:
            full = self.final_text(output_ids, reason) if reason else self._decode(output_ids)
            end = len(full) if reason else safe_prefix_len(full, self.stops)
            text, self.emitted_text = full[self.emitted_text : end], max(end, self.emitted_text)
        if not new_ids and not text and reason is None:
            return None
        return StreamOutput(rid, index, text, new_ids, reason is not None, reason)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
