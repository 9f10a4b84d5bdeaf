"""`PrefixBlocks`: a router's approximate prefix tree of the prompts it sent one replica.

A prompt is the chain of its whole blocks of `block_size` tokens, each block keyed by its
parent's key and its own tokens (a hash chain, as block-hashing prefix caches key their
pages), so two prompts share a key exactly when they share every token up to the end of
that block. The tree is the set of keys it was given; a prompt matches it for as many
leading blocks as it holds. Approximate as the SGLang router's tree is: it forgets nothing
(the replica's cache may have evicted what the tree still holds) and ignores the last
partial block.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_BLOCK_SIZE = 32


def block_chain(tokens: Sequence[int], block_size: int = DEFAULT_BLOCK_SIZE) -> list[int]:
    """The keys of the prompt's whole blocks, in order."""
    keys, parent = [], 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start:start + block_size])))
        keys.append(parent)
    return keys


class PrefixBlocks:
    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.block_size = block_size
        self._keys: set[int] = set()

    def matched_tokens(self, chain: Sequence[int]) -> int:
        """Tokens of the leading blocks of `chain` the tree holds."""
        n = 0
        for key in chain:
            if key not in self._keys:
                break
            n += 1
        return n * self.block_size

    def insert(self, chain: Sequence[int]) -> None:
        self._keys.update(chain)

    @property
    def size_tokens(self) -> int:
        """Tokens the tree holds (each distinct block once)."""
        return len(self._keys) * self.block_size
