"""`torch_threads(n)`: run a block with n torch intra-op threads, then restore the count.

Small models gain nothing from more threads, and on a busy 2-core host OpenMP spin-waiting
can make their matmuls 10-100x slower.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
