"""Stop strings (`SamplingParams.stop`): find them in the decoded output, and hold back
text that might still grow into one, so streamed text never has to be taken back."""

from __future__ import annotations

from collections.abc import Sequence

TAIL_TOKENS_MARGIN = 4


def find_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(index, stop string) of the earliest stop string in `text`, or None."""
    hits = [(text.find(s), s) for s in stops if s in text]
    return min(hits) if hits else None


def tail_tokens(stops: Sequence[str]) -> int:
    """How many trailing tokens to decode to see a stop string that just completed (a token
    decodes to at least one character, except partial UTF-8 bytes: hence the margin)."""
    return max(map(len, stops)) + TAIL_TOKENS_MARGIN


def safe_prefix_len(text: str, stops: Sequence[str]) -> int:
    """Length of the prefix of `text` that can be emitted: it drops a trailing partial
    UTF-8 character and the longest suffix that is a prefix of some stop string."""
    end = len(text.rstrip("\ufffd"))
    hold = max((_overlap(text[:end], s) for s in stops), default=0)
    return end - hold


def _overlap(text: str, stop: str) -> int:
    """The longest k < len(stop) such that `text` ends with stop[:k]."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0
