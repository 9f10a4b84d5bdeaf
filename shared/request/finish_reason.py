"""Why a request stopped: length, a stop token or string, or an abort (semantics §7.6)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

FinishType = Literal["length", "stop", "abort"]


@dataclass(frozen=True)
class FinishReason:
    """`type` is length / stop / abort; `matched` is the stop token id or stop string that
    ended the request; `message` explains an abort; `length` is the output length at a
    length finish."""

    type: FinishType
    matched: int | str | None = None
    message: str | None = None
    length: int | None = None

    @classmethod
    def by_length(cls, length: int) -> FinishReason:
        return cls("length", length=length)

    @classmethod
    def by_stop(cls, matched: int | str) -> FinishReason:
        return cls("stop", matched=matched)

    @classmethod
    def by_abort(cls, message: str) -> FinishReason:
        return cls("abort", message=message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FinishReason:
        return cls(**d)
