"""`TokenStream`: numpy's `rng.integers(0, vocab_size, size=total)`, cut into pieces and drawn
again piece by piece on demand, without holding the `total` tokens.

Contract: for a `numpy.random.Generator` over PCG64 (`numpy.random.default_rng`) and piece
lengths `lengths` ([n] ints >= 0), `TokenStream.draw(rng, lengths, vocab_size)` leaves `rng`
in exactly the state (`bit_generator.state`, its buffered 32-bit half included) that
`rng.integers(0, vocab_size, size=lengths.sum())` would, and `stream.tokens(a, b)` is that
call's output for pieces `a..b-1` ([sum(lengths[a:b])] int64), equal element by element, for
any 0 <= a <= b <= n, in any order. Memory: two [n + 1] int64 arrays and the start state.

How numpy draws (numpy/random/src/distributions/distributions.c, `random_bounded_uint64_fill`,
reached from `_bounded_integers.pyx` `_rand_int64` with rng = vocab_size - 1, inclusive):
- rng == 0: every value is 0, nothing is drawn;
- rng < 2**32: one 32-bit word per try (`next_uint32`: PCG64 hands out the low half of a
  64-bit raw output, keeps the high half in its state, `has_uint32` / `uinteger`, and hands
  that out next, across calls), Lemire's method: m = word * (rng + 1), accepted unless
  low32(m) < (2**32 - 1 - rng) % (rng + 1), value m >> 32 (rng == 2**32 - 1 takes the words
  as they are, which is the same formula with nothing rejected);
- else: one 64-bit raw output per try, the same with 64-bit halves of the 128-bit product
  (the buffered 32-bit half is left alone).
So the stream is a sequence of units (32-bit words or raw outputs); a piece's tokens come
from a contiguous run of units, and `draw` finds where each run starts with one chunked pass
over the units (only rejected units are kept: with vocab_size 128256 one in ~33,000) and
moves the generator past the last unit with `PCG64.advance`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

CHUNK_UNITS = 1 << 18   # units per pass of the scan: the arrays stay in cache
_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class _Lemire:
    """numpy's bounded draw of [0, excl): `bits` per unit (0: nothing drawn), the rejection
    threshold on the product's low half."""

    bits: int
    excl: int
    threshold: int

    @classmethod
    def of(cls, vocab_size: int) -> _Lemire:
        rng = vocab_size - 1
        if rng == 0:
            return cls(0, 1, 0)
        bits = 32 if rng <= _MASK32 else 64
        return cls(bits, rng + 1, ((1 << bits) - 1 - rng) % (rng + 1))

    def accepts(self, units: np.ndarray) -> np.ndarray:
        """[U] bool: the units that give a value. `units`: [U] uint32 or uint64."""
        low = units * units.dtype.type(self.excl & ((1 << self.bits) - 1))  # NOTE: wraps mod 2**bits
        return low >= self.threshold

    def values(self, units: np.ndarray) -> np.ndarray:
        """[U] int64: the high half of unit * excl, for accepted units."""
        if self.bits == 32:
            return ((units.astype(np.uint64) * np.uint64(self.excl)) >> np.uint64(32)).astype(np.int64)
        return _mul_high64(units, self.excl).astype(np.int64)


def _mul_high64(x: np.ndarray, y: int) -> np.ndarray:
    """[U] uint64: the high 64 bits of x * y (numpy's 32-bit-limb `umulh`)."""
    m, s = np.uint64(_MASK32), np.uint64(32)
    x0, x1, y0, y1 = x & m, x >> s, np.uint64(y & _MASK32), np.uint64(y >> 32)
    t = x1 * y0 + ((x0 * y0) >> s)
    w1 = (t & m) + x0 * y1
    return x1 * y1 + (t >> s) + (w1 >> s)


class TokenStream:
    """The token ids of one `integers` call, piece by piece (module doc)."""

    def __init__(self, start: dict[str, Any], vocab_size: int, token_starts: np.ndarray,
                 unit_starts: np.ndarray) -> None:
        self.start = start                  # the bit generator's state before the call
        self.vocab_size = vocab_size
        self.token_starts = token_starts    # [n + 1] int64: piece i is tokens [s[i], s[i+1])
        self.unit_starts = unit_starts      # [n + 1] int64: and comes from these units
        self._law = _Lemire.of(vocab_size)

    @classmethod
    def draw(cls, rng: np.random.Generator, lengths: np.ndarray, vocab_size: int,
             chunk_units: int = CHUNK_UNITS) -> TokenStream:
        """The stream of `rng.integers(0, vocab_size, size=lengths.sum())`; moves `rng` past it
        (`chunk_units`: how many units the scan reads at a time; any size gives the same)."""
        if not isinstance(rng.bit_generator, np.random.PCG64):
            raise TypeError(f"a token stream needs a PCG64 generator, got {rng.bit_generator!r}")
        start = copy.deepcopy(rng.bit_generator.state)
        ends = np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])
        law = _Lemire.of(vocab_size)
        if law.bits == 0:
            units = np.zeros_like(ends)
        elif law.threshold == 0:   # NOTE: nothing is ever rejected: token k is unit k
            units = ends
        else:
            units = _scan(start, law, ends, chunk_units)
        rng.bit_generator.state = _state_after(start, law.bits, int(units[-1]))
        return cls(start, vocab_size, ends, units)

    def __len__(self) -> int:
        return len(self.token_starts) - 1

    def tokens(self, a: int, b: int) -> np.ndarray:
        """[sum of lengths a..b-1] int64: pieces a..b-1 of the stream, concatenated."""
        count = int(self.token_starts[b] - self.token_starts[a])
        if self._law.bits == 0:
            return np.zeros(count, dtype=np.int64)
        u0, u1 = int(self.unit_starts[a]), int(self.unit_starts[b])
        units = _units(self.start, self._law.bits, u0, u1 - u0)
        out = self._law.values(units[self._law.accepts(units)])
        assert len(out) == count, "the units between two piece starts hold exactly its tokens"
        return out

    def same_stream(self, other: TokenStream) -> bool:
        """Whether the two give the same pieces (same start, vocabulary and cuts)."""
        return (self.start == other.start and self.vocab_size == other.vocab_size
                and np.array_equal(self.token_starts, other.token_starts))


def _scan(start: dict[str, Any], law: _Lemire, ends: np.ndarray, chunk: int) -> np.ndarray:
    """[n + 1] int64: the unit each piece starts at, one past the unit that drew the piece
    before's last token (`ends`: [n + 1] token starts, `ends[-1]` the total)."""
    out = np.zeros_like(ends)   # a piece starting at token 0 starts at unit 0
    i, accepted, u0 = int(np.searchsorted(ends, 1)), 0, 0
    while i < len(ends):
        rejected = np.flatnonzero(~law.accepts(_units(start, law.bits, u0, chunk)))
        gained = chunk - len(rejected)
        j = int(np.searchsorted(ends, accepted + gained, side="right"))
        rank = ends[i:j] - 1 - accepted   # the token before each piece start: its rank here
        # NOTE: the k-th rejected unit precedes the token of rank q iff rejected[k] - k <= q
        skipped = np.searchsorted(rejected - np.arange(len(rejected)), rank, side="right")
        out[i:j] = u0 + rank + skipped + 1
        i, accepted, u0 = j, accepted + gained, u0 + chunk
    return out


def _generator_at(start: dict[str, Any], skip: int) -> np.random.PCG64:
    """A PCG64 `skip` raw outputs after `start` (its buffered half cleared)."""
    generator = np.random.PCG64()
    generator.state = start
    generator.advance(skip)
    return generator


def _raws(start: dict[str, Any], skip: int, count: int) -> np.ndarray:
    """[count] uint64: the raw outputs `skip ..` after `start`."""
    return _generator_at(start, skip).random_raw(count)


def _units(start: dict[str, Any], bits: int, u0: int, count: int) -> np.ndarray:
    """[count] uint{bits}: units u0 .. u0 + count - 1 of the stream that starts at `start`.
    32-bit units: the buffered half (if any), then each raw output's low half, then high."""
    if bits == 64:
        return _raws(start, u0, count)
    held = start["has_uint32"]
    head = np.array([start["uinteger"]] if u0 < held and count else [], dtype=np.uint32)
    h0, h1 = max(u0 - held, 0), u0 + count - held
    raws = _raws(start, h0 // 2, (h1 + 1) // 2 - h0 // 2)
    halves = raws.astype("<u8", copy=False).view("<u4")   # NOTE: little-endian: low half first
    rest = halves[h0 % 2:h0 % 2 + h1 - h0].astype(np.uint32, copy=False)
    return np.concatenate([head, rest]) if len(head) else rest


def _state_after(start: dict[str, Any], bits: int, used: int) -> dict[str, Any]:
    """The bit generator's state once `used` units of the stream are drawn (module doc)."""
    state = copy.deepcopy(start)
    held = start["has_uint32"] if bits == 32 else 0
    raws = used if bits == 64 else (used - held + 1) // 2   # (no draws: `used` is 0)
    if raws:
        state["state"] = _generator_at(start, raws).state["state"]
    if bits == 32 and used:
        state["has_uint32"] = (used - held) % 2
        if raws:   # NOTE: the last raw output's high half stays in `uinteger`, read or not
            state["uinteger"] = int(_raws(start, raws - 1, 1)[0] >> np.uint64(32))
    return state
