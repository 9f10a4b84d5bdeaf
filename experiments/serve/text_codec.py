"""Text to token ids and back, for the server: `EngineCodec` (the real executor's tokenizer
and chat template), `TokenizerCodec` (a simulated model whose folder holds a tokenizer.json)
and `PlaceholderCodec` (a simulated model without one); `simulated_codec` picks for a model.

`PlaceholderCodec` cuts a prompt into chunks of CHARS_PER_TOKEN characters (the common
estimate: one token is about four characters of English text), each chunk's id a hash of it
(BLAKE2b, so a shared text prefix gives shared leading ids, and the radix cache sees the
reuse a real tokenizer would); a token id reads back as " t<id>". Its chat template puts
each message as `<|role|>` and its content, then the assistant's turn; `TokenizerCodec`
tokenizes that same text (the model's own chat template is the real executor's).

Both raise InvalidRequestError naming the field for a prompt they cannot encode.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from shared.request.invalid_request import InvalidRequestError

if TYPE_CHECKING:
    from exec.engine.engine import Engine

CHARS_PER_TOKEN = 4


class PlaceholderCodec:
    """`special_ids` (the model's EOS) read back as no text, as a tokenizer skips them."""

    def __init__(self, vocab_size: int, special_ids: Sequence[int] = ()) -> None:
        self.vocab_size, self._special = vocab_size, frozenset(int(i) for i in special_ids)

    def encode(self, text: str) -> list[int]:
        chunks = [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]
        return [int.from_bytes(hashlib.blake2b(c.encode(), digest_size=8).digest(), "little")
                % self.vocab_size for c in chunks]

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.encode(placeholder_chat(messages))

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(f" t{i}" for i in ids if i not in self._special)


def placeholder_chat(messages: list[dict]) -> str:
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


class TokenizerCodec:
    """A tokenizer.json through the `tokenizers` package: prompt lengths and answer text
    as the model's tokenizer gives them (special tokens skipped in answers)."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.encode(placeholder_chat(messages))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)


def simulated_codec(model: str, vocab_size: int,
                    special_ids: Sequence[int] = ()) -> PlaceholderCodec | TokenizerCodec:
    """The codec of a simulated `model` (an embedded key, a config.json or its folder): the
    tokenizer.json beside its config when there is one, else placeholders."""
    path = Path(model)
    found = (path if path.is_dir() else path.parent) / "tokenizer.json"
    if not (path.exists() and found.is_file()):
        return PlaceholderCodec(vocab_size, special_ids)
    try:
        return TokenizerCodec(found)
    except ImportError:
        warnings.warn(f"{found} needs the tokenizers package (pip install -e \".[exec]\"); "
                      "serving placeholder tokens", stacklevel=2)
        return PlaceholderCodec(vocab_size, special_ids)


class EngineCodec:
    """The Engine's own tokenizer (BOS as the model adds it) and chat template; a model
    without a tokenizer takes token-id prompts only and reads back as placeholder text."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._tokenizer = engine.tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._engine.tokenize(text))

    def encode_chat(self, messages: list[dict]) -> list[int]:
        try:
            return list(self._engine.tokenize(messages, chat=True))
        except ValueError as e:   # no chat template, or it refused the messages
            raise InvalidRequestError("messages", None, str(e)) from None

    def decode(self, ids: Sequence[int]) -> str:
        if self._tokenizer is None:
            return "".join(f" t{i}" for i in ids)
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)
