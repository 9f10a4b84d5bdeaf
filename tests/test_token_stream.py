"""`shared.workload.token_stream.TokenStream` against numpy: its pieces are one
`rng.integers(0, vocab_size, size=total)` call's output, and the generator is left where
that call leaves it, whatever the vocabulary, the pieces, the scan's chunk size and the
generator's buffered 32-bit half at the start."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.workload.token_stream import TokenStream
from tests.strategies import token_pieces, vocab_sizes

seeds = st.integers(0, 2**32)
warmups = st.integers(0, 3)   # small draws first: an odd count leaves a buffered 32-bit half
chunks = st.sampled_from((1, 2, 3, 7, 64, 1 << 18))


def _pair(seed: int, warmup: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Two generators in the same state, after `warmup` 32-bit draws."""
    pair = np.random.default_rng(seed), np.random.default_rng(seed)
    for rng in pair:
        rng.integers(0, 10, size=warmup)
    return pair


@given(seeds, vocab_sizes, token_pieces(), warmups, chunks)
def test_pieces_are_numpys_one_call_cut_into_lengths(seed, vocab, lengths, warmup, chunk):
    """Piece by piece, and any run of pieces, the stream is numpy's one call."""
    mine, ref = _pair(seed, warmup)
    want = ref.integers(0, vocab, size=sum(lengths))
    stream = TokenStream.draw(mine, np.array(lengths, dtype=np.int64), vocab, chunk)
    ends = np.cumsum([0, *lengths])
    for i in range(len(lengths)):
        np.testing.assert_array_equal(stream.tokens(i, i + 1), want[ends[i]:ends[i + 1]])
    for a in range(len(lengths) + 1):
        b = len(lengths) - a // 2
        if a <= b:
            np.testing.assert_array_equal(stream.tokens(a, b), want[ends[a]:ends[b]])


@given(seeds, vocab_sizes, token_pieces(), warmups, chunks)
def test_generator_state_after_the_stream_is_numpys(seed, vocab, lengths, warmup, chunk):
    """The bit generator's state (buffered half included) equals the one numpy's call leaves,
    so every later draw agrees."""
    mine, ref = _pair(seed, warmup)
    ref.integers(0, vocab, size=sum(lengths))
    TokenStream.draw(mine, np.array(lengths, dtype=np.int64), vocab, chunk)
    assert mine.bit_generator.state == ref.bit_generator.state
    assert mine.integers(0, 1000, size=3).tolist() == ref.integers(0, 1000, size=3).tolist()
    assert mine.lognormal(size=2).tolist() == ref.lognormal(size=2).tolist()


@given(seeds, st.sampled_from((3, 128256, 2**31 + 1, 3 * 2**61)), token_pieces(max_len=200),
       chunks)
def test_scan_chunk_size_does_not_move_the_piece_starts(seed, vocab, lengths, chunk):
    """Where each piece's draws start does not depend on how the scan reads the units."""
    a = TokenStream.draw(np.random.default_rng(seed), np.array(lengths, dtype=np.int64), vocab, chunk)
    b = TokenStream.draw(np.random.default_rng(seed), np.array(lengths, dtype=np.int64), vocab)
    np.testing.assert_array_equal(a.unit_starts, b.unit_starts)
    assert a.same_stream(b)


def test_long_stream_with_rejections_is_numpys():
    """A million tokens over 128256 ids (about 14 words rejected: 58624 in 2**32) across scan
    chunks, in pieces of ShareGPT-like lengths."""
    lengths = np.random.default_rng(1).integers(1, 2000, size=1000)
    mine, ref = _pair(5, 1)
    want = ref.integers(0, 128256, size=int(lengths.sum()))
    stream = TokenStream.draw(mine, lengths, 128256, 4096)
    np.testing.assert_array_equal(stream.tokens(0, len(lengths)), want)
    piece = slice(*stream.token_starts[[700, 703]])
    np.testing.assert_array_equal(stream.tokens(700, 703), want[piece])
    assert mine.bit_generator.state == ref.bit_generator.state
    assert int(stream.unit_starts[-1]) > int(stream.token_starts[-1])   # some were rejected


def test_a_generator_other_than_pcg64_is_refused():
    with pytest.raises(TypeError, match="PCG64"):
        TokenStream.draw(np.random.Generator(np.random.MT19937(0)), np.array([3]), 10)
