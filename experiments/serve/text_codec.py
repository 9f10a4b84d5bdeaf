"""`PlaceholderCodec`: text to token ids and back for a simulated model without a tokenizer.

A prompt is cut into chunks of CHARS_PER_TOKEN characters (the common estimate: one token is
about four characters of English text), each chunk's id a hash of it (BLAKE2b, so a shared
text prefix gives shared leading ids, and the radix cache sees the reuse a real tokenizer
would); a token id reads back as " t<id>".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

CHARS_PER_TOKEN = 4


class PlaceholderCodec:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        chunks = [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]
        return [int.from_bytes(hashlib.blake2b(c.encode(), digest_size=8).digest(), "little")
                % self.vocab_size for c in chunks]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(f" t{i}" for i in ids)
