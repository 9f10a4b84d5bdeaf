"""`ForwardMode`: what kind of forward a batch is, with SGLang's predicates (semantics §8.1)."""

from __future__ import annotations

from enum import IntEnum


class ForwardMode(IntEnum):
    EXTEND = 1  # prefill, possibly over a cached prefix
    DECODE = 2  # one token per request
    MIXED = 3   # chunked prefill plus decode requests shown as 1-token extends
    IDLE = 4    # empty batch

    def is_prefill(self) -> bool:
        return self.is_extend()

    def is_extend(self) -> bool:
        """True for EXTEND and MIXED: both run through the extend path."""
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED)

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_mixed(self) -> bool:
        return self == ForwardMode.MIXED

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE

    def is_decode_or_idle(self) -> bool:
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)

    def is_cuda_graph(self) -> bool:
        """Modes a captured CUDA graph can replay."""
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)

    def is_cpu_graph(self) -> bool:
        return self == ForwardMode.DECODE
