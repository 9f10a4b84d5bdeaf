"""argparse `type=` functions shared by the commands: a bad value is a usage error (exit 2)
whose message argparse prefixes with the flag (`argument --seed: must be ...`).

    p.add_argument("--tp", type=positive_int, default=1)
"""

from __future__ import annotations

import argparse
import math

SEED_MAX = 2**63 - 1  # NOTE: seeds travel as int64 (ForwardBatch.sampling_seeds)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in [0, 2**63 - 1]."""
    value = _int(text)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**63 - 1], got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (a temperature)."""
    value = _float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1) (a range ratio)."""
    value = _float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def positive_float(text: str) -> float:
    """A number > 0, inf allowed (a request rate)."""
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def positive_finite_float(text: str) -> float:
    """A finite number > 0 (a target rate, a tolerance's scale)."""
    value = _float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def open_fraction(text: str) -> float:
    """A number in (0, 1) (a relative tolerance)."""
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def at_least(minimum: int):
    """The argparse type of an integer >= `minimum`."""
    def check(text: str) -> int:
        value = _int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    check.__name__ = f"integer >= {minimum}"
    return check
