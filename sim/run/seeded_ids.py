"""Seeded token ids: a counter-based hash (splitmix64) of (request key, output index), mapped
uniformly onto the vocabulary minus some excluded ids (`IdDraw`). `sim.run.token_source`'s
synthetic source draws its ids with these.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

# splitmix64 (Steele, Lea, Flood 2014): state_i = key + (i + 1) * GOLDEN, output = mix(state_i).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_2 = np.uint64(0x94D049BB133111EB)
SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
MASK_64 = (1 << 64) - 1


def splitmix64(z: np.ndarray, keys_plus_golden: np.ndarray) -> np.ndarray:
    """uint64 element-wise: output z of the splitmix64 stream seeded with key, computed in
    place in `z` (wrapping). Takes key + GOLDEN, as the state (z + 1) * GOLDEN + key equals
    z * GOLDEN + (key + GOLDEN)."""
    z *= GOLDEN
    z += keys_plus_golden
    return mix(z)


def mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function of the states `z`, in place (one scratch array)."""
    t = z >> SHIFTS[0]
    z ^= t
    z *= MIX_1
    np.right_shift(z, SHIFTS[1], out=t)
    z ^= t
    z *= MIX_2
    np.right_shift(z, SHIFTS[2], out=t)
    z ^= t
    return z


def splitmix64_int(z: int, key_plus_golden: int) -> int:
    """`splitmix64` of one value, in Python ints (a single row costs ~10x less than numpy)."""
    z = (z * int(GOLDEN) + key_plus_golden) & MASK_64
    z ^= z >> int(SHIFTS[0])
    z = (z * int(MIX_1)) & MASK_64
    z ^= z >> int(SHIFTS[1])
    z = (z * int(MIX_2)) & MASK_64
    return z ^ (z >> int(SHIFTS[2]))


def skip_ids(values: np.ndarray, excluded: Sequence[int]) -> np.ndarray:
    """Map values in [0, V - len(excluded)) one-to-one onto [0, V) minus `excluded`
    (sorted ascending, each in [0, V))."""
    return _shift_past(values.astype(np.int64), skip_thresholds(excluded))


def skip_thresholds(excluded: Sequence[int]) -> np.ndarray:
    """[k] int64 e_k - k for the sorted excluded ids e (non-decreasing)."""
    return np.asarray(excluded, dtype=np.int64) - np.arange(len(excluded))


def _shift_past(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """skip_ids on int64 values. NOTE: adding 1 at each excluded e in turn (ascending) sends
    v to v + #{k: v >= e_k - k}; the thresholds are sorted, so one searchsorted counts them."""
    if len(thresholds):
        values += thresholds.searchsorted(values, side="right")
    return values


class IdDraw(NamedTuple):
    """Uniform ids over [0, V) minus some excluded ids, from raw 64-bit values."""

    choices: int               # V minus the excluded ids
    choices_u64: np.uint64     # the same, for `ids`
    thresholds: np.ndarray     # [k] skip_thresholds of the excluded ids
    threshold_list: list[int]  # the same, for `pick`

    @classmethod
    def of(cls, vocab_size: int, excluded: Sequence[int]) -> IdDraw:
        """`excluded`: sorted ascending, each in [0, vocab_size)."""
        thresholds, choices = skip_thresholds(excluded), vocab_size - len(excluded)
        return cls(choices, np.uint64(max(choices, 0)), thresholds, thresholds.tolist())

    def ids(self, raw: np.ndarray) -> np.ndarray:
        """int64 ids of uint64 `raw` (any shape), computed in place."""
        raw %= self.choices_u64
        return _shift_past(raw.view(np.int64), self.thresholds)   # < 2**63: same values

    def pick(self, raw: int) -> int:
        """`ids` of one raw value, in Python ints."""
        v = raw % self.choices
        return v + bisect.bisect_right(self.threshold_list, v)
